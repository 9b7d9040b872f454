// bf16 GEMM through cuBLASLt with f32 accumulation, in the layout of a torch Linear:
// y[m, n] = alpha * x[m, k] · w[n, k]^T + beta * y. Plans (descriptors + an algorithm) are
// cached per shape, so a decode step pays no planning cost. For batched-decode shapes (large
// weights, kTuneMinRows <= m <= kTuneMaxRows) the plan's algorithm is the fastest of the
// heuristic's first kTuneCandidates, timed once on the first eager call of that shape (the
// first pick was 4-5 % slower per 8B layer than the best of its top 8 at m = 16-128, W2 lab);
// other shapes, and a shape first met inside a stream capture, keep the first pick. A plan
// never changes once made, so graph replays and eager calls of a shape run the same kernel;
// two GemmBf16 objects may pick different algorithms for a tuned shape (outputs then differ
// by summation order only). Small m (decode) goes to gemv_bf16 instead.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "base/status.h"
#include "kernels/cuda/device_context.h"

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

class GemmBf16 {
 public:
  // Below 9 rows a step is a short prompt more often than a decode batch: its first step
  // (start to first token) should not wait for the timing runs.
  static constexpr int kTuneMinRows = 9;
  static constexpr int kTuneMaxRows = 384;
  static constexpr int kTuneCandidates = 6;
  static constexpr int64_t kTuneMinWeights = int64_t{8} << 20;  // n * k: 16 MB of bf16

  explicit GemmBf16(DeviceContext& ctx) : ctx_(&ctx) {}
  ~GemmBf16();
  GemmBf16(const GemmBf16&) = delete;
  GemmBf16& operator=(const GemmBf16&) = delete;

  // x: [m, k] (row stride ldx), w: [n, k] (row stride ldw), y: [m, n] (row stride ldy),
  // bf16 or f32 per shape.out. Runs on ctx.stream(). Pointers must be 16-byte aligned.
  Status run(const GemmShape& shape, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int, bool>;
  // The cached plan of `shape`, made on first use (timing candidates on these operands when
  // the shape is tuned and the stream is not capturing).
  Result<const Plan*> plan_for(const GemmShape& shape, const __nv_bfloat16* x,
                               const __nv_bfloat16* w, void* y);
  // Index of the fastest of `algos` on these operands (each run twice after a warm-up).
  Result<int> fastest(const Plan& plan, const cublasLtMatmulHeuristicResult_t* algos, int count,
                      const __nv_bfloat16* x, const __nv_bfloat16* w, void* y);

  DeviceContext* ctx_;
  std::map<Key, Plan> plans_;
};

}  // namespace hearth::cuda
