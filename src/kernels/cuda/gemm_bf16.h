// bf16 GEMM through cuBLASLt with f32 accumulation, in the layout of a torch Linear:
// y[m, n] = alpha * x[m, k] · w[n, k]^T + beta * y. Plans (descriptors + the heuristic's
// algorithm) are cached per shape, so a decode step pays no planning cost. Small m (decode)
// goes to gemv_bf16 instead, which streams the weights faster than cuBLASLt does at m = 1.
// GemmBf16Options::wgmma (HEARTH_WGMMA_GEMM=1) sends 3-128 rows on an sm_90 device to
// wgmma_gemm (gemm_wgmma.cuh): off by default until it wins a paired A/B.
// GemmBf16Options::batch_invariant runs every call in one summation order per weight shape (by
// default cuBLASLt's algorithms that do not split k), so a row's sums do not depend on how many
// rows share the call.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <string>
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
  // runs in invariant_form, so each row of y is summed in an order that depends only on the
  // shape of w (not on m or on the row's place). The caller's x and y must hold
  // GemmBf16::operand_rows(m) rows: the block forms read and write rows past m.
  bool batch_invariant = false;
  // How a batch-invariant call runs (from_env: HEARTH_INVARIANT_GEMM=unsplit|batched|single):
  // - kUnsplit (default): one cuBLASLt call of the caller's m rows, of the algorithm id the
  //   shape's 64-row plan takes, with k in one piece: from 64 rows the first candidate
  //   cuBLASLt itself runs unsplit among its candidates for m, 2m and 4m rows, else (and below
  //   64 rows) its first candidate for m forced to split-K 1, no reduction. On the H200
  //   (lab_invariant_gemm, the 8B shapes, 1-4096 rows) every unsplit algorithm gave every row the
  //   same bytes whatever its tile or the row count; split-K ones gave bytes of their own per split
  //   count. So a row's sums depend only on w's shape while each m runs its own tile: no padding
  //   needed, and a large m runs as fast as the default route's unsplit pick. The gtest checks rows
  //   across calls of 1-300 rows;
  // - the block forms run one algorithm, the chosen one of invariant_plan_rows' plan, on
  //   blocks of kInvariantRows rows: kBatched (sessions 21-22's form, the A/B baseline) as one
  //   strided-batched call (w shared, stride 0), kSingle (lab_invariant_gemm's sweep of one
  //   algorithm across row counts) as one plain call over all the blocks' rows; a call a
  //   block where cuBLASLt refuses either on the shape.
  enum class InvariantForm { kUnsplit, kBatched, kSingle };
  InvariantForm invariant_form = InvariantForm::kUnsplit;
  // The row count whose cuBLASLt plan supplies the block forms' algorithm (a multiple of
  // kInvariantRows; from_env: HEARTH_INVARIANT_PLAN_ROWS).
  int invariant_plan_rows = 64;
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
  // x and y hold operand_rows(m) rows.
  Status run(const GemmShape& shape, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y);
  // The rows x and y must hold for a call of m rows: m, or m rounded up to whole blocks of
  // kInvariantRows under a batch-invariant block form.
  int operand_rows(int m) const;

  // cuBLASLt's candidate algorithms for a shape, best heuristic guess first (at most
  // kMaxCandidates); run() uses the chosen one, candidate 0 unless choose() picked another.
  // For timing candidates the way a decode step runs them (lab_wgmma_gemm).
  static constexpr int kMaxCandidates = 8;
  Result<int> candidates(const GemmShape& shape);
  Status choose(const GemmShape& shape, int candidate);
  // The chosen algorithm's configuration for a shape, as "id=.. tile=.. stages=.. splitk=..
  // reduction=.. cluster=.." (labs: which algorithms keep a row's sums apart from m).
  Result<std::string> describe(const GemmShape& shape);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t c = nullptr;
    cublasLtMatmulAlgo_t algos[kMaxCandidates]{};
    int count = 0;   // candidates in algos
    int chosen = 0;  // the one run() uses
    // kUnsplit's algorithm for this shape, once resolved (unsplit_plan).
    bool unsplit_resolved = false;
    cublasLtMatmulAlgo_t unsplit{};
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
  // s's plan with its kUnsplit algorithm (Plan::unsplit; see the option) resolved, once per
  // shape.
  Result<Plan*> unsplit_plan(const GemmShape& s);
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
