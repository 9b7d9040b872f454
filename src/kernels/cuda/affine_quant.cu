// Affine-quantized GEMV: one warp per output feature, each lane streaming 16-byte words of
// packed weights (coalesced across the warp) and folding the group's scale and bias in as
// s * Σ q·x + b * Σ x, so dequantization never leaves registers.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/common.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// q as float without an int->float conversion (a quarter-rate instruction): OR the bits
// into the mantissa of 2^23 and subtract 2^23, both full-rate.
__device__ __forceinline__ float small_uint_to_float(uint32_t q) {
  return __uint_as_float(0x4B000000u | q) - 8388608.0f;
}

template <int kBits>
struct ChunkMath {
  static constexpr int kPerWord = 32 / kBits;     // values per uint32
  static constexpr int kPerChunk = 4 * kPerWord;  // values per 16-byte chunk
  static constexpr uint32_t kMask = (1u << kBits) - 1;
};

// Adds s * Σ q·x + b * Σ x of one 16-byte chunk to acc[r] for every row r.
template <int kBits, int kRows>
__device__ __forceinline__ void chunk_dot(const uint4& packed, float s, float b,
                                          const __nv_bfloat16* x, int64_t ldx, float* acc) {
  using M = ChunkMath<kBits>;
  const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
  float q[M::kPerChunk];
#pragma unroll
  for (int wi = 0; wi < 4; ++wi) {
#pragma unroll
    for (int j = 0; j < M::kPerWord; ++j) {
      q[wi * M::kPerWord + j] = small_uint_to_float((words[wi] >> (kBits * j)) & M::kMask);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float sum_qx = 0.0f;
    float sum_x = 0.0f;
#pragma unroll
    for (int i = 0; i < M::kPerChunk; i += 8) {
      float xf[8];
      detail::load_bf16<8>(x + r * ldx + i, xf);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        sum_qx += q[i + j] * xf[j];
        sum_x += xf[j];
      }
    }
    acc[r] += s * sum_qx + b * sum_x;
  }
}

// kSharedX: x is first copied to shared memory (when it fits), so the per-chunk x reads hit
// shared memory instead of L1.
template <int kBits, int kRows, typename ScaleT, typename OutT, bool kSharedX>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    affine_gemv_kernel(AffineQuantWeight w, const __nv_bfloat16* x, int64_t ldx, OutT* y,
                       int64_t ldy) {
  using M = ChunkMath<kBits>;
  extern __shared__ uint4 x_shared[];
  const __nv_bfloat16* xv = x;
  int64_t ldxv = ldx;
  if constexpr (kSharedX) {
    const int x_chunks = w.k / 8;
    for (int i = threadIdx.x; i < kRows * x_chunks; i += blockDim.x) {
      x_shared[i] = *reinterpret_cast<const uint4*>(x + (i / x_chunks) * ldx + (i % x_chunks) * 8);
    }
    __syncthreads();
    xv = reinterpret_cast<const __nv_bfloat16*>(x_shared);
    ldxv = w.k;
  }
  const int lane = threadIdx.x & 31;
  const int chunks = w.k / M::kPerChunk;
  const int groups = w.k / w.group_size;
  for (int n = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5); n < w.n;
       n += gridDim.x * kWarpsPerBlock) {
    const uint4* wrow =
        reinterpret_cast<const uint4*>(w.packed + static_cast<int64_t>(n) * (w.k / M::kPerWord));
    const ScaleT* srow = static_cast<const ScaleT*>(w.scales) + static_cast<int64_t>(n) * groups;
    const ScaleT* brow = static_cast<const ScaleT*>(w.biases) + static_cast<int64_t>(n) * groups;
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    int c = lane;
    for (; c + 32 < chunks; c += 64) {  // two chunks in flight per lane
      uint4 p0 = __ldg(wrow + c);
      uint4 p1 = __ldg(wrow + c + 32);
      int g0 = c * M::kPerChunk / w.group_size;
      int g1 = (c + 32) * M::kPerChunk / w.group_size;
      float s0 = to_float(srow[g0]);
      float b0 = to_float(brow[g0]);
      float s1 = to_float(srow[g1]);
      float b1 = to_float(brow[g1]);
      chunk_dot<kBits, kRows>(p0, s0, b0, xv + c * M::kPerChunk, ldxv, acc);
      chunk_dot<kBits, kRows>(p1, s1, b1, xv + (c + 32) * M::kPerChunk, ldxv, acc);
    }
    for (; c < chunks; c += 32) {
      int g = c * M::kPerChunk / w.group_size;
      chunk_dot<kBits, kRows>(__ldg(wrow + c), to_float(srow[g]), to_float(brow[g]),
                              xv + c * M::kPerChunk, ldxv, acc);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = detail::warp_sum(acc[r]);
      if (lane == 0) {
        if constexpr (sizeof(OutT) == 4) {
          y[r * ldy + n] = v;
        } else {
          y[r * ldy + n] = __float2bfloat16(v);
        }
      }
    }
  }
}

template <int kBits, typename ScaleT>
__global__ void affine_embedding_kernel(AffineQuantWeight w, const int32_t* ids, float scale,
                                        __nv_bfloat16* out, int64_t ld_out) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  int t = blockIdx.x;
  int id = ids[t];
  __nv_bfloat16* dst = out + t * ld_out;
  if (id < 0 || id >= w.n) {
    for (int i = threadIdx.x; i < w.k; i += blockDim.x) dst[i] = __float2bfloat16(0.0f);
    return;
  }
  int groups = w.k / w.group_size;
  const uint32_t* row = w.packed + static_cast<int64_t>(id) * (w.k / kPerWord);
  const ScaleT* s = static_cast<const ScaleT*>(w.scales) + static_cast<int64_t>(id) * groups;
  const ScaleT* b = static_cast<const ScaleT*>(w.biases) + static_cast<int64_t>(id) * groups;
  for (int i = threadIdx.x; i < w.k; i += blockDim.x) {
    uint32_t q = (row[i / kPerWord] >> (kBits * (i % kPerWord))) & kMask;
    int g = i / w.group_size;
    float v = to_float(s[g]) * static_cast<float>(q) + to_float(b[g]);
    dst[i] = __float2bfloat16(v * scale);
  }
}

template <int kBits, typename ScaleT>
__global__ void affine_dequantize_kernel(AffineQuantWeight w, __nv_bfloat16* out, int64_t ld_out) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  int64_t words_per_row = w.k / kPerWord;
  int64_t total = words_per_row * w.n;
  int groups = w.k / w.group_size;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n = idx / words_per_row;
    int col = static_cast<int>(idx % words_per_row) * kPerWord;
    int g = col / w.group_size;
    float s = to_float(static_cast<const ScaleT*>(w.scales)[n * groups + g]);
    float b = to_float(static_cast<const ScaleT*>(w.biases)[n * groups + g]);
    uint32_t word = w.packed[idx];
#pragma unroll
    for (int j = 0; j < kPerWord; ++j) {
      out[n * ld_out + col + j] =
          __float2bfloat16(s * static_cast<float>((word >> (kBits * j)) & kMask) + b);
    }
  }
}

template <int kBits, typename ScaleT, typename OutT>
cudaError_t launch_gemv(const AffineQuantWeight& w, const __nv_bfloat16* x, int64_t ldx, int m,
                        OutT* y, int64_t ldy, int sm_count, cudaStream_t stream) {
  dim3 grid(std::min(detail::ceil_div(w.n, kWarpsPerBlock), std::max(1, sm_count) * 4));
  dim3 block(kWarpsPerBlock * 32);
  size_t smem = static_cast<size_t>(m) * w.k * sizeof(__nv_bfloat16);
  bool shared_x = smem <= 48 * 1024;
  switch (m) {
#define HEARTH_GEMV_CASE(rows)                                \
  case rows:                                                  \
    if (shared_x) {                                           \
      affine_gemv_kernel<kBits, rows, ScaleT, OutT, true>     \
          <<<grid, block, smem, stream>>>(w, x, ldx, y, ldy); \
    } else {                                                  \
      affine_gemv_kernel<kBits, rows, ScaleT, OutT, false>    \
          <<<grid, block, 0, stream>>>(w, x, ldx, y, ldy);    \
    }                                                         \
    break;
    HEARTH_GEMV_CASE(1)
    HEARTH_GEMV_CASE(2)
    HEARTH_GEMV_CASE(3)
    HEARTH_GEMV_CASE(4)
    HEARTH_GEMV_CASE(5)
    HEARTH_GEMV_CASE(6)
    HEARTH_GEMV_CASE(7)
    HEARTH_GEMV_CASE(8)
#undef HEARTH_GEMV_CASE
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool valid_weight(const AffineQuantWeight& w) {
  return (w.bits == 4 || w.bits == 8) &&
         (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) && w.n > 0 && w.k > 0 &&
         w.k % w.group_size == 0 && w.packed != nullptr && w.scales != nullptr &&
         w.biases != nullptr;
}

template <typename OutT>
cudaError_t dispatch_gemv(const AffineQuantWeight& w, const __nv_bfloat16* x, int64_t ldx, int m,
                          OutT* y, int64_t ldy, int sm_count, cudaStream_t stream) {
  if (w.bits == 4) {
    return w.f16_scales ? launch_gemv<4, __half>(w, x, ldx, m, y, ldy, sm_count, stream)
                        : launch_gemv<4, __nv_bfloat16>(w, x, ldx, m, y, ldy, sm_count, stream);
  }
  return w.f16_scales ? launch_gemv<8, __half>(w, x, ldx, m, y, ldy, sm_count, stream)
                      : launch_gemv<8, __nv_bfloat16>(w, x, ldx, m, y, ldy, sm_count, stream);
}

}  // namespace

cudaError_t affine_gemv(const AffineQuantWeight& w, const __nv_bfloat16* x, int64_t ldx, int m,
                        void* y, int64_t ldy, bool y_f32, int sm_count, cudaStream_t stream) {
  if (!valid_weight(w) || m < 1 || m > kAffineGemvMaxRows || ldx < w.k || ldy < w.n ||
      ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w.packed) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (y_f32) return dispatch_gemv(w, x, ldx, m, static_cast<float*>(y), ldy, sm_count, stream);
  return dispatch_gemv(w, x, ldx, m, static_cast<__nv_bfloat16*>(y), ldy, sm_count, stream);
}

cudaError_t affine_embedding_gather(const AffineQuantWeight& w, const int32_t* ids, int tokens,
                                    float scale, __nv_bfloat16* out, int64_t ld_out,
                                    cudaStream_t stream) {
  if (!valid_weight(w) || tokens < 0 || ld_out < w.k) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  if (w.bits == 4) {
    if (w.f16_scales) {
      affine_embedding_kernel<4, __half><<<tokens, 256, 0, stream>>>(w, ids, scale, out, ld_out);
    } else {
      affine_embedding_kernel<4, __nv_bfloat16>
          <<<tokens, 256, 0, stream>>>(w, ids, scale, out, ld_out);
    }
  } else if (w.f16_scales) {
    affine_embedding_kernel<8, __half><<<tokens, 256, 0, stream>>>(w, ids, scale, out, ld_out);
  } else {
    affine_embedding_kernel<8, __nv_bfloat16>
        <<<tokens, 256, 0, stream>>>(w, ids, scale, out, ld_out);
  }
  return cudaGetLastError();
}

cudaError_t affine_dequantize(const AffineQuantWeight& w, __nv_bfloat16* out, int64_t ld_out,
                              cudaStream_t stream) {
  if (!valid_weight(w) || ld_out < w.k) return cudaErrorInvalidValue;
  int64_t words = static_cast<int64_t>(w.n) * (w.k * w.bits / 32);
  int blocks = static_cast<int>(std::min<int64_t>((words + 255) / 256, 65536));
  if (w.bits == 4) {
    if (w.f16_scales) {
      affine_dequantize_kernel<4, __half><<<blocks, 256, 0, stream>>>(w, out, ld_out);
    } else {
      affine_dequantize_kernel<4, __nv_bfloat16><<<blocks, 256, 0, stream>>>(w, out, ld_out);
    }
  } else if (w.f16_scales) {
    affine_dequantize_kernel<8, __half><<<blocks, 256, 0, stream>>>(w, out, ld_out);
  } else {
    affine_dequantize_kernel<8, __nv_bfloat16><<<blocks, 256, 0, stream>>>(w, out, ld_out);
  }
  return cudaGetLastError();
}

}  // namespace hearth::cuda
