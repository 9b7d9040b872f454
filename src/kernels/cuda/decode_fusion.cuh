// Device math shared by the unfused decode kernels and their fused forms in the decode GEMV
// (gemv_bf16.cu), so both produce the same bits: the reduction order of rmsnorm_residual's
// sum of squares and the gated activations' formulas.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"

namespace hearth::cuda::detail {

// rmsnorm_residual's block size for a row of `dim`: each thread sums elements t, t + threads,
// ... in order, then block_sum reduces (xor-tree per warp, then over the warps' sums).
__host__ __device__ constexpr int rmsnorm_threads(int dim) {
  return dim >= 4096 ? 1024 : dim >= 1024 ? 512 : 256;
}

// act(g) * u in f32 (g and u are bf16 values), rounded once by the caller.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ float gelu_tanh_mul(float g, float u) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
}

}  // namespace hearth::cuda::detail
