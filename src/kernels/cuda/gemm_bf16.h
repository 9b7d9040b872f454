// bf16 GEMM through cuBLASLt with f32 accumulation, in the layout of a torch Linear:
// y[m, n] = alpha * x[m, k] · w[n, k]^T + beta * y. Plans (descriptors + the heuristic's
// algorithm) are cached per shape, so a decode step pays no planning cost. Small m (decode)
// goes to gemv_bf16 instead, which streams the weights faster than cuBLASLt does at m = 1.
// GemmBf16Options::skinny (HEARTH_SKINNY_GEMM=1) sends 3-128 rows to skinny_gemm
// (gemm_skinny.cuh) instead: an experiment, off by default (it measured 0.26-0.99x cuBLASLt).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "base/status.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_skinny.cuh"

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
  // Route skinny m (see skinny_gemm_routed) to skinny_gemm instead of cuBLASLt. Only the f32
  // summation order differs. from_env: HEARTH_SKINNY_GEMM=0 turns it off, =1 on (A/B runs);
  // unset keeps this default.
  bool skinny = false;
  static GemmBf16Options from_env();
};

// True when GemmBf16 with options.skinny sends the shape to skinny_gemm (dev/cuda/NOTES.md,
// gpu-gemm).
bool skinny_gemm_routed(int m, int n, int k);

class GemmBf16 {
 public:
  explicit GemmBf16(DeviceContext& ctx, GemmBf16Options options = GemmBf16Options::from_env());
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
  Result<const Plan*> plan_for(const GemmShape& shape);

  DeviceContext* ctx_;
  GemmBf16Options options_;
  DeviceBuffer skinny_counters_;  // split-K arrival counters, zero between calls (empty:
                                  // no split-K); the partials live in ctx's workspace
  std::map<Key, Plan> plans_;
};

}  // namespace hearth::cuda
