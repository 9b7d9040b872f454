// bf16 GEMM through cuBLASLt with f32 accumulation, in the layout of a torch Linear:
// y[m, n] = alpha * x[m, k] · w[n, k]^T + beta * y. Plans (descriptors + the heuristic's
// algorithm) are cached per shape, so a decode step pays no planning cost. Small m (decode)
// goes to gemv_bf16 instead, which streams the weights faster than cuBLASLt does at m = 1.
// GemmBf16Options::wgmma (HEARTH_WGMMA_GEMM=1) sends 3-128 rows on an sm_90 device to
// wgmma_gemm (gemm_wgmma.cuh): off by default until it wins a paired A/B.
// GemmBf16Options::batch_invariant runs every call in one fixed summation order per weight
// shape (by default blocks of kInvariantRows rows through one cuBLASLt plan), so a row's sums
// do not depend on how many rows share the call.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "base/status.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_wgmma.cuh"

namespace hearth::cuda {

enum class GemmOut { kBf16, kF32 };

struct GemmShape {
  int m = 0;        // rows of x and y (tokens)
  int n = 0;        // rows of w, columns of y (output features)
  int k = 0;        // columns of x and w (input features)
  int64_t ldx = 0;  // elements between rows of x (>= k)
  int64_t ldw = 0;  // elements between rows of w (>= k)
  int64_t ldy = 0;  // elements between rows of y (>= n)
  GemmOut out = GemmOut::kBf16;
  bool accumulate = false;  // beta = 1 (y += x·wᵀ, e.g. the residual add) instead of 0
};

struct GemmBf16Options {
  // Route 3-128 rows on sm_90 to wgmma_gemm (f32 sums in another order than cuBLASLt's).
  // from_env: HEARTH_WGMMA_GEMM=0 / =1; unset keeps this default.
  bool wgmma = false;
  // Batch-invariant (--batch-invariant): no GEMV, no wgmma route by row count; every call
  // runs in invariant_form, by default as ceil(m / kInvariantRows) blocks of exactly
  // kInvariantRows rows through the plan of that one shape, so each row of y is summed in an
  // order that depends only on the shape of w (not on m or on the row's place). The caller's
  // x and y must hold ceil(m / kInvariantRows) * kInvariantRows rows: rows past m may be read
  // and written.
  bool batch_invariant = false;
  // How a batch-invariant call of several blocks runs, always with the block plan's algorithm
  // (from_env: HEARTH_INVARIANT_GEMM=blocks|batched|single|wgmma):
  // - kBlocks: one cuBLASLt call a block;
  // - kBatched (default): one strided-batched call (w shared, stride 0), where cuBLASLt accepts
  //   the algorithm on it: the same kernel on the same blocks, so the same bits (gtest), and
  //   faster (8B on the H200: 256 rows 1.06x, a 4096-token prefill 1.09x);
  // - kSingle: one plain call over all the blocks' rows, where cuBLASLt accepts the algorithm
  //   on that shape. The same bits only if the algorithm's per-row sums do not depend on the
  //   row count (a stream-K kernel's would): not yet checked on a device (the invariance gtest
  //   runs every form), so not the default;
  // - kWgmma (sm_90; HEARTH_INVARIANT_GEMM=wgmma): wgmma_gemm in calls of up to kWgmmaMaxRows
  //   rows, no padding needed: its k order and split points depend only on n and k, so a row's
  //   bits depend on the row count only if the wgmma's N (16-128, from m) changes them: not
  //   yet checked on a device (the gtest and lab_wgmma_gemm's row-invariance probe do). Other
  //   devices fall back to kBatched.
  enum class InvariantForm { kBlocks, kBatched, kSingle, kWgmma };
  InvariantForm invariant_form = InvariantForm::kBatched;
  static GemmBf16Options from_env();
};

constexpr int kInvariantRows = 64;

// True when GemmBf16 with options.wgmma sends m rows to wgmma_gemm on an sm_90 device.
bool wgmma_gemm_routed(int m);

class GemmBf16 {
 public:
  explicit GemmBf16(DeviceContext& ctx, GemmBf16Options options = GemmBf16Options::from_env());
  bool batch_invariant() const { return options_.batch_invariant; }
  ~GemmBf16();
  GemmBf16(const GemmBf16&) = delete;
  GemmBf16& operator=(const GemmBf16&) = delete;

  // x: [m, k] (row stride ldx), w: [n, k] (row stride ldw), y: [m, n] (row stride ldy),
  // bf16 or f32 per shape.out. Runs on ctx.stream(). Pointers must be 16-byte aligned.
  // Batch-invariant: x and y padded to whole blocks of kInvariantRows rows (see the option).
  Status run(const GemmShape& shape, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y);

  // cuBLASLt's candidate algorithms for a shape, best heuristic guess first (at most
  // kMaxCandidates); run() uses the chosen one, candidate 0 unless choose() picked another.
  // For timing candidates the way a decode step runs them (lab_wgmma_gemm).
  static constexpr int kMaxCandidates = 8;
  Result<int> candidates(const GemmShape& shape);
  Status choose(const GemmShape& shape, int candidate);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t c = nullptr;
    cublasLtMatmulAlgo_t algos[kMaxCandidates]{};
    int count = 0;   // candidates in algos
    int chosen = 0;  // the one run() uses
  };
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, bool>;
  static Key key_of(const GemmShape& shape);
  Result<Plan*> plan_for(const GemmShape& shape);
  // A plan's layouts for `shape` as a strided batch of `blocks` (x and y blocks shape.m rows
  // apart, w shared; blocks = 1: one plain call of shape); usable when cuBLASLt accepts the
  // plan's chosen algorithm on them.
  struct Batched {
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t c = nullptr;
    bool usable = false;
  };
  Result<const Batched*> batched_for(const GemmShape& shape, const Plan& plan, int blocks);
  // wgmma_gemm on s when this device and shape take it (counters and workspace suffice):
  // true once launched, false when the caller should take another route.
  Result<bool> run_wgmma(const GemmShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w,
                         void* y);
  // The batch-invariant form of run(), in options_.invariant_form.
  Status run_invariant(const GemmShape& shape, const __nv_bfloat16* x, const __nv_bfloat16* w,
                       void* y);

  DeviceContext* ctx_;
  GemmBf16Options options_;
  // wgmma_gemm's per-tile arrival counters, zero between calls (empty: no wgmma route); its
  // partial sums live in ctx's workspace.
  DeviceBuffer wgmma_counters_;
  std::map<Key, Plan> plans_;
  std::map<std::pair<Key, int>, Batched> batched_;
};

}  // namespace hearth::cuda
