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

template <int kBits, int kRows, typename ScaleT, typename OutT>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    affine_gemv_kernel(AffineQuantWeight w, const __nv_bfloat16* x, int64_t ldx, OutT* y,
                       int64_t ldy) {
  constexpr int kPerWord = 32 / kBits;     // values per uint32
  constexpr int kPerChunk = 4 * kPerWord;  // values per 16-byte chunk
  constexpr uint32_t kMask = (1u << kBits) - 1;
  int lane = threadIdx.x & 31;
  int n = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (n >= w.n) return;
  int chunks = w.k / kPerChunk;
  int groups = w.k / w.group_size;
  const uint4* wrow =
      reinterpret_cast<const uint4*>(w.packed + static_cast<int64_t>(n) * (w.k / kPerWord));
  const ScaleT* srow = static_cast<const ScaleT*>(w.scales) + static_cast<int64_t>(n) * groups;
  const ScaleT* brow = static_cast<const ScaleT*>(w.biases) + static_cast<int64_t>(n) * groups;

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  for (int c = lane; c < chunks; c += 32) {
    uint4 packed = __ldg(wrow + c);
    int g = c * kPerChunk / w.group_size;
    float s = to_float(srow[g]);
    float b = to_float(brow[g]);
    uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    float q[kPerChunk];
#pragma unroll
    for (int wi = 0; wi < 4; ++wi) {
#pragma unroll
      for (int j = 0; j < kPerWord; ++j) {
        q[wi * kPerWord + j] = static_cast<float>((words[wi] >> (kBits * j)) & kMask);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const __nv_bfloat16* xr = x + r * ldx + c * kPerChunk;
      float sum_qx = 0.0f;
      float sum_x = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerChunk; i += 8) {
        float xf[8];
        detail::load_bf16<8>(xr + i, xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          sum_qx += q[i + j] * xf[j];
          sum_x += xf[j];
        }
      }
      acc[r] += s * sum_qx + b * sum_x;
    }
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
                        OutT* y, int64_t ldy, cudaStream_t stream) {
  dim3 grid(detail::ceil_div(w.n, kWarpsPerBlock));
  dim3 block(kWarpsPerBlock * 32);
  switch (m) {
#define HEARTH_GEMV_CASE(rows)                                                                    \
  case rows:                                                                                      \
    affine_gemv_kernel<kBits, rows, ScaleT, OutT><<<grid, block, 0, stream>>>(w, x, ldx, y, ldy); \
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
                          OutT* y, int64_t ldy, cudaStream_t stream) {
  if (w.bits == 4) {
    return w.f16_scales ? launch_gemv<4, __half>(w, x, ldx, m, y, ldy, stream)
                        : launch_gemv<4, __nv_bfloat16>(w, x, ldx, m, y, ldy, stream);
  }
  return w.f16_scales ? launch_gemv<8, __half>(w, x, ldx, m, y, ldy, stream)
                      : launch_gemv<8, __nv_bfloat16>(w, x, ldx, m, y, ldy, stream);
}

}  // namespace

cudaError_t affine_gemv(const AffineQuantWeight& w, const __nv_bfloat16* x, int64_t ldx, int m,
                        void* y, int64_t ldy, bool y_f32, cudaStream_t stream) {
  if (!valid_weight(w) || m < 1 || m > kAffineGemvMaxRows || ldx < w.k || ldy < w.n ||
      ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w.packed) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (y_f32) return dispatch_gemv(w, x, ldx, m, static_cast<float*>(y), ldy, stream);
  return dispatch_gemv(w, x, ldx, m, static_cast<__nv_bfloat16*>(y), ldy, stream);
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
