// Device math shared by the unfused decode kernels and their fused forms in the decode GEMV
// (gemv_bf16.cu), so both produce the same bits: the reduction order of rmsnorm_residual's
// sum of squares, the gated activations' formulas, the RoPE rotation of one pair, and the
// decode GEMVs' (bf16 and affine) reduction of a task's partial sums over lanes and warps.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"

namespace hearth::cuda::detail {

// The decode GEMVs' task reduction: each warp's kPair x kRows partial dot products are summed
// over its lanes, then, when `split` warps share one task (split > 1, uniform across the
// block), over those warps through red[parity] ([warps][kPair * kRows]); the sums land in the
// task's first warp (sub 0), lane 0. parity flips after each shared round so the next task's
// writes need no second barrier. The order of the adds is the kernels' contract (bits).
template <int kPair, int kRows, int kWarps>
__device__ __forceinline__ void reduce_task_sums(float (&acc)[kPair][kRows],
                                                 float (&red)[2][kWarps][kPair * kRows],
                                                 int& parity, int warp, int sub, int lane,
                                                 int split) {
#pragma unroll
  for (int p = 0; p < kPair; ++p) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[p][r] = warp_sum(acc[p][r]);
  }
  if (split <= 1) return;
  if (lane == 0) {
#pragma unroll
    for (int p = 0; p < kPair; ++p) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) red[parity][warp][p * kRows + r] = acc[p][r];
    }
  }
  __syncthreads();
  if (sub == 0 && lane == 0) {
#pragma unroll
    for (int p = 0; p < kPair; ++p) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        for (int q = 1; q < split; ++q) acc[p][r] += red[parity][warp + q][p * kRows + r];
      }
    }
  }
  parity ^= 1;
}

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

// RoPE (rotate-half) of the pair (x1 at dim i, x2 at dim i + rotary_dim / 2) at `pos`:
// angle pos * inv_freq in f32 with accurate sincosf (fast intrinsics lose precision at large
// positions), cos and sin times `scaling`, each output rounded once. The multiply-adds are
// spelled out so every kernel that rotates gets the same bits.
__device__ __forceinline__ void rope_pair(float pos, float inv_freq, float scaling, float x1,
                                          float x2, __nv_bfloat16* o1, __nv_bfloat16* o2) {
  float s;
  float c;
  sincosf(pos * inv_freq, &s, &c);
  c *= scaling;
  s *= scaling;
  *o1 = __float2bfloat16(__fmaf_rn(x1, c, -__fmul_rn(x2, s)));
  *o2 = __float2bfloat16(__fmaf_rn(x2, c, __fmul_rn(x1, s)));
}

}  // namespace hearth::cuda::detail
