// bf16 GEMV: x staged in shared memory once per block, a grid-stride loop of warps over
// output rows, each lane keeping four 16-byte weight loads in flight.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_bf16.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarps = 16;
constexpr int kUnroll = 4;
constexpr size_t kMaxSharedBytes = 48 * 1024;

__device__ __forceinline__ void unpack8(const uint4& raw, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 v = __bfloat1622float2(h[j]);
    f[2 * j] = v.x;
    f[2 * j + 1] = v.y;
  }
}

__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int kRows, typename OutT>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_bf16_kernel(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                     OutT* y, int64_t ldy, bool accumulate, int n, int k) {
  extern __shared__ uint4 xs[];  // [kRows, k / 8]
  const int chunks = k / 8;
  const int lane = threadIdx.x & 31;
  // The first weight loads of this warp's first row go out before x is staged, so the
  // x prologue overlaps the weight stream instead of delaying it.
  const int first_row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  bool prefetched = first_row < n && lane + 32 * (kUnroll - 1) < chunks;
  uint4 pre[kUnroll];
  if (prefetched) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + first_row * ldw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) pre[u] = load_streaming(wr + lane + 32 * u);
  }
  for (int i = threadIdx.x; i < kRows * chunks; i += blockDim.x) {
    int r = i / chunks;
    int c = i % chunks;
    xs[i] = *reinterpret_cast<const uint4*>(x + r * ldx + c * 8);
  }
  __syncthreads();
  for (int row = blockIdx.x * kWarps + (threadIdx.x >> 5); row < n; row += gridDim.x * kWarps) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + row * ldw);
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    int c = lane;
    for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
      uint4 wv[kUnroll];
      if (prefetched) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = pre[u];
        prefetched = false;
      } else {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = load_streaming(wr + c + 32 * u);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float wf[8];
        unpack8(wv[u], wf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float xf[8];
          unpack8(xs[r * chunks + c + 32 * u], xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r] += wf[j] * xf[j];
        }
      }
    }
    for (; c < chunks; c += 32) {
      float wf[8];
      unpack8(load_streaming(wr + c), wf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float xf[8];
        unpack8(xs[r * chunks + c], xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] += wf[j] * xf[j];
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = detail::warp_sum(acc[r]);
      if (lane == 0) {
        OutT* dst = y + r * ldy + row;
        if constexpr (sizeof(OutT) == 4) {
          *dst = accumulate ? *dst + v : v;
        } else {
          *dst = __float2bfloat16(accumulate ? __bfloat162float(*dst) + v : v);
        }
      }
    }
  }
}

template <typename OutT>
cudaError_t launch(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                   OutT* y, int64_t ldy, bool accumulate, int m, int n, int k, int sm_count,
                   cudaStream_t stream) {
  size_t smem = static_cast<size_t>(m) * k * sizeof(__nv_bfloat16);
  int blocks = std::min(detail::ceil_div(n, kWarps), std::max(1, sm_count) * 2);
  dim3 block(kWarps * 32);
  switch (m) {
    case 1:
      gemv_bf16_kernel<1, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    case 2:
      gemv_bf16_kernel<2, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    case 3:
      gemv_bf16_kernel<3, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    case 4:
      gemv_bf16_kernel<4, OutT>
          <<<blocks, block, smem, stream>>>(x, ldx, w, ldw, y, ldy, accumulate, n, k);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

bool gemv_bf16_supported(int m, int n, int k, const void* x, int64_t ldx, const void* w,
                         int64_t ldw) {
  return m >= 1 && m <= kGemvMaxRows && n > 0 && k > 0 && k % 8 == 0 && ldx % 8 == 0 &&
         ldw % 8 == 0 && static_cast<size_t>(m) * k * 2 <= kMaxSharedBytes &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

cudaError_t gemv_bf16(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                      void* y, int64_t ldy, bool y_f32, bool accumulate, int m, int n, int k,
                      int sm_count, cudaStream_t stream) {
  if (!gemv_bf16_supported(m, n, k, x, ldx, w, ldw) || ldx < k || ldw < k || ldy < n) {
    return cudaErrorInvalidValue;
  }
  if (y_f32) {
    return launch(x, ldx, w, ldw, static_cast<float*>(y), ldy, accumulate, m, n, k, sm_count,
                  stream);
  }
  return launch(x, ldx, w, ldw, static_cast<__nv_bfloat16*>(y), ldy, accumulate, m, n, k, sm_count,
                stream);
}

}  // namespace hearth::cuda
