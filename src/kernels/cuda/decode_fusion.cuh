// Device math shared by the unfused decode kernels and their fused forms in the decode GEMV
// (gemv_bf16.cu, affine_quant.cu, affine_gemv_mma.cu), so both produce the same bits: the
// reduction order of rmsnorm_residual's sum of squares, the gated activations' formulas, the RoPE
// rotation of one pair, and the decode GEMVs' (bf16 and affine) reduction of a task's partial sums
// over lanes and warps.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope_kv_write.cuh"

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

// Per x row r < rows, inv[r] = 1 / rms(x row) with rmsnorm_residual's summation order: this
// block's kThreads threads play its rmsnorm_threads(k) threads, each summing x[t],
// x[t + threads], ... (scratch: 32 floats of shared memory).
template <int kThreads>
__device__ void block_inverse_rms(const __nv_bfloat16* x, int64_t ldx, int rows, int k, float eps,
                                  float* inv, float* scratch) {
  const int vthreads = rmsnorm_threads(k);
  constexpr int kWarps = kThreads / 32;
  constexpr int kMaxVirtual = 1024 / kThreads;
  // Elements a virtual thread loads before it adds them (all kMaxVirtual * kBatch loads of a
  // thread in flight at once: the loop of dependent scalar loads cost ~4 L2 round trips at
  // k = 4096). The adds keep the order x[t], x[t + threads], ...
  constexpr int kBatch = 4;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll 1
  for (int r = 0; r < rows; ++r) {
    const __nv_bfloat16* row = x + r * ldx;
    float s[kMaxVirtual];
#pragma unroll
    for (int j = 0; j < kMaxVirtual; ++j) s[j] = 0.0f;
#pragma unroll 1
    for (int base = 0; base < k; base += kBatch * vthreads) {
      float v[kMaxVirtual][kBatch];
      bool in[kMaxVirtual][kBatch];  // element i of virtual thread vt exists
#pragma unroll
      for (int j = 0; j < kMaxVirtual; ++j) {
        const int vt = threadIdx.x + j * kThreads;
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int i = base + vt + b * vthreads;
          in[j][b] = vt < vthreads && i < k;
          v[j][b] = in[j][b] ? __bfloat162float(row[i]) : 0.0f;
        }
      }
#pragma unroll
      for (int j = 0; j < kMaxVirtual; ++j) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (in[j][b]) s[j] += v[j][b] * v[j][b];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxVirtual; ++j) {
      const float t = warp_sum(s[j]);
      if (lane == 0 && warp + j * kWarps < vthreads / 32) scratch[warp + j * kWarps] = t;
    }
    __syncthreads();
    const float total = warp_sum(lane < vthreads / 32 ? scratch[lane] : 0.0f);
    if (threadIdx.x == 0) inv[r] = rsqrtf(total / static_cast<float>(k) + eps);
    __syncthreads();  // scratch is rewritten by the next row
  }
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

// rope_kv_write's stores for one RoPE pair of x row r, rows i and i + head_dim / 2 of head
// task / (head_dim / 2) of the fused q|k|v output, x1 and x2 their values already rounded to
// bf16: rotated into q_out (q heads) or the K cache, or copied into the V cache; slot < 0
// writes no K/V. pos, slot and freq are positions[r], slots[r] and inv_freq[i].
__device__ __forceinline__ void rope_kv_store(const RopeKvWriteArgs& p, int r, int task, float x1,
                                              float x2, float pos, int64_t slot, float freq) {
  const int half = p.head_dim / 2;
  const int head = task / half;
  const int i = task - head * half;
  __nv_bfloat16* dst;
  if (head < p.q_heads) {
    dst = p.q_out + r * p.ld_q_out + head * p.head_dim + i;
  } else {
    if (slot < 0) return;
    const bool is_v = head >= p.q_heads + p.kv_heads;
    const int kv_head = head - p.q_heads - (is_v ? p.kv_heads : 0);
    dst = (is_v ? p.v_cache : p.k_cache) + (slot * p.kv_heads + kv_head) * p.head_dim + i;
    if (is_v) {
      dst[0] = __float2bfloat16(x1);
      dst[half] = __float2bfloat16(x2);
      return;
    }
  }
  rope_pair(pos, freq, p.attention_scaling, x1, x2, dst, dst + half);
}

}  // namespace hearth::cuda::detail
