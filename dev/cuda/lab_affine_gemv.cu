// Lab for the MLX-affine quantized GEMV (issue 5): the src kernel against variants that
// stage x once per CTA (scaled half pairs + per-chunk Σx), unpack 2 weights per instruction
// with the magic-number trick and multiply in packed halves, on every 8B shape, 4 and 8 bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/affine_gemv_mma.cuh"
#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope_kv_write.cuh"
#include "kernels/cuda/sampling.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;

// Owned device memory (the lab stays off DeviceContext so it builds as plain CUDA C++17).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { CK(cudaMalloc(&ptr_, bytes)); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float to_f(Bf16 v) { return __bfloat162float(v); }

// ==== V0: the src kernel before issue 5 (commit c4ef7a6), kept as the baseline ====
namespace v0 {
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

}  // namespace v0
// ==== END V0 ====

// ---------------------------------------------------------------------------------------
// Reference: one warp per row, every value decoded on its own in f32.
template <typename ScaleT>
__device__ float ref_dot(const AffineQuantWeight& w, int n, const Bf16* xr, int lane) {
  const int per_word = 32 / w.bits;
  const uint32_t mask = (1u << w.bits) - 1;
  const int groups = w.k / w.group_size;
  const uint32_t* row = w.packed + int64_t(n) * (w.k / per_word);
  const ScaleT* s = static_cast<const ScaleT*>(w.scales) + int64_t(n) * groups;
  const ScaleT* b = static_cast<const ScaleT*>(w.biases) + int64_t(n) * groups;
  float acc = 0.0f;
  for (int i = lane; i < w.k; i += 32) {
    uint32_t q = (row[i / per_word] >> (w.bits * (i % per_word))) & mask;
    int g = i / w.group_size;
    acc += (float(s[g]) * float(q) + float(b[g])) * __bfloat162float(xr[i]);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

__global__ void ref_kernel(AffineQuantWeight w, const Bf16* x, int64_t ldx, int m, float* y,
                           int64_t ldy) {
  int n = blockIdx.x * kWarps + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (n >= w.n) return;
  for (int r = 0; r < m; ++r) {
    float v = w.f16_scales ? ref_dot<__half>(w, n, x + r * ldx, lane)
                           : ref_dot<Bf16>(w, n, x + r * ldx, lane);
    if (lane == 0) y[r * ldy + n] = v;
  }
}

// ---------------------------------------------------------------------------------------
// Variant "h2": x staged per CTA, packed-half products.
//
// A chunk is one 16-byte word of packed weights: 32 values at 4 bits, 16 at 8 bits. The
// prologue writes, per x row and chunk, the x values divided by a power of two 2^e (so the
// chunk's largest |x| is in [1, 2)) as half pairs in the order the unpacking produces them,
// and (2^e, Σx) of the chunk. The main loop then needs per chunk and row: the half dot
// Σ q·x' (exact q from the magic-number trick, products and 8-term sums in half), and
// acc += (s·2^e)·dot + b·Σx in f32.
//
// Variant "f32" (kF32 = true): the same staging and loop, but x stays f32 in shared memory
// (no x scaling) and each value is unpacked alone into an f32 by the 2^23 trick, in place:
// nibble i of a word (i < 4; t >> 16 for the rest) masked into 2^23's mantissa is n·16^i, so
// x is pre-multiplied by 16^-i;
// products and sums in f32 (exact but for the summation order, like the src kernel).
template <int kBits, bool kF32 = false>
struct H2 {
  static constexpr int kPerChunk = 128 / kBits;  // 32 or 16 values
  // 16-byte x slots per chunk: half pairs (4-bit: 4, 8-bit: 2) or f32 (8 / 4).
  static constexpr int kSlots = (kBits == 4 ? 4 : 2) * (kF32 ? 2 : 1);
};

__device__ __forceinline__ uint32_t h2_bits(__half2 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __half2 as_h2(uint32_t v) { return *reinterpret_cast<__half2*>(&v); }

// Stages x [m, k] into shared memory: slots [m][kSlots][chunks] of uint4 then
// stats [m][chunks] of float2 (2^e, Σx). Returns nothing; the caller syncs.
template <int kBits, bool kF32>
__device__ __forceinline__ void stage_x(const Bf16* x, int64_t ldx, int m, int chunks, uint4* xs,
                                        float2* stats) {
  using T = H2<kBits, kF32>;
  for (int u = threadIdx.x; u < m * chunks; u += blockDim.x) {
    const int r = u / chunks;
    const int c = u - r * chunks;
    float v[T::kPerChunk];
    const Bf16* src = x + r * ldx + c * T::kPerChunk;
#pragma unroll
    for (int i = 0; i < T::kPerChunk; i += 8) {
      uint4 raw = *reinterpret_cast<const uint4*>(src + i);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float2 f = __bfloat1622float2(h[j]);
        v[i + 2 * j] = f.x;
        v[i + 2 * j + 1] = f.y;
      }
    }
    float amax = 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < T::kPerChunk; ++i) {
      amax = fmaxf(amax, fabsf(v[i]));
      sum += v[i];
    }
    // 2^e with amax in [2^e, 2^(e+1)): x / 2^e in (-2, 2). Zero or subnormal amax: scale 0
    // (the chunk contributes nothing through the dot); inf/NaN: propagate through the scale.
    uint32_t ebits = __float_as_uint(amax) & 0x7F800000u;
    float scale;
    float inv;
    if (ebits == 0) {
      scale = 0.0f;
      inv = 0.0f;
    } else if (ebits == 0x7F800000u) {
      scale = amax;
      inv = 0.0f;
    } else {
      scale = __uint_as_float(ebits);
      inv = __uint_as_float(0x7F000000u - ebits);
    }
    if constexpr (kF32) {
      stats[r * chunks + c] = make_float2(1.0f, sum);
      float4* xf = reinterpret_cast<float4*>(xs);
      if constexpr (kBits == 4) {
        // value i of a word scaled by 16^-(i % 4) (i >= 4 are taken from t >> 16).
        const float kPos[8] = {1.0f, 0.0625f, 0.00390625f, 0.000244140625f,
                               1.0f, 0.0625f, 0.00390625f, 0.000244140625f};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int b = 8 * j + 4 * h;
            xf[(r * 8 + 2 * j + h) * chunks + c] =
                make_float4(v[b] * kPos[4 * h], v[b + 1] * kPos[4 * h + 1],
                            v[b + 2] * kPos[4 * h + 2], v[b + 3] * kPos[4 * h + 3]);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          xf[(r * 4 + j) * chunks + c] =
              make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
        }
      }
      continue;
    }
    stats[r * chunks + c] = make_float2(scale, sum);
    if constexpr (kBits == 4) {
      // word j holds values 8j..8j+7; pairs (0,4) (1,5) (2,6) (3,7).
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float* p = v + 8 * j;
        uint4 o;
        o.x = h2_bits(__floats2half2_rn(p[0] * inv, p[4] * inv));
        o.y = h2_bits(__floats2half2_rn(p[1] * inv, p[5] * inv));
        o.z = h2_bits(__floats2half2_rn(p[2] * inv, p[6] * inv));
        o.w = h2_bits(__floats2half2_rn(p[3] * inv, p[7] * inv));
        xs[(r * 4 + j) * chunks + c] = o;
      }
    } else {
      // word j holds values 4j..4j+3; pairs (0,2) (1,3); slot jj holds words 2jj, 2jj+1.
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const float* p = v + 8 * jj;
        uint4 o;
        o.x = h2_bits(__floats2half2_rn(p[0] * inv, p[2] * inv));
        o.y = h2_bits(__floats2half2_rn(p[1] * inv, p[3] * inv));
        o.z = h2_bits(__floats2half2_rn(p[4] * inv, p[6] * inv));
        o.w = h2_bits(__floats2half2_rn(p[5] * inv, p[7] * inv));
        xs[(r * 2 + jj) * chunks + c] = o;
      }
    }
  }
}

// Σ q·x' of one chunk against one staged x row (xs points at slot 0 of the chunk; slots
// are `stride` uint4 apart).
template <int kBits>
__device__ __forceinline__ float chunk_dot_h2(const uint4& p, const uint4* xs, int stride) {
  const __half2 k1024 = as_h2(0x64006400u);
  __half2 a0 = as_h2(0u);
  __half2 a1 = as_h2(0u);
  const uint32_t wv[4] = {p.x, p.y, p.z, p.w};
  if constexpr (kBits == 4) {
    const __half2 k16th = as_h2(0x2C002C00u);   // 1/16
    const __half2 kneg64 = as_h2(0xD400D400u);  // -64
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 xv = xs[j * stride];
      const uint32_t t = wv[j];
      const uint32_t t8 = t >> 8;
      __half2 q0 = __hsub2(as_h2((t & 0x000F000Fu) | 0x64006400u), k1024);
      __half2 q1 = __hfma2(as_h2((t & 0x00F000F0u) | 0x64006400u), k16th, kneg64);
      __half2 q2 = __hsub2(as_h2((t8 & 0x000F000Fu) | 0x64006400u), k1024);
      __half2 q3 = __hfma2(as_h2((t8 & 0x00F000F0u) | 0x64006400u), k16th, kneg64);
      a0 = __hfma2(q0, as_h2(xv.x), a0);
      a1 = __hfma2(q1, as_h2(xv.y), a1);
      a0 = __hfma2(q2, as_h2(xv.z), a0);
      a1 = __hfma2(q3, as_h2(xv.w), a1);
    }
  } else {
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const uint4 xv = xs[jj * stride];
      const uint32_t t0 = wv[2 * jj];
      const uint32_t t1 = wv[2 * jj + 1];
      __half2 q0 = __hsub2(as_h2(__byte_perm(t0, 0x64646464u, 0x4240)), k1024);
      __half2 q1 = __hsub2(as_h2(__byte_perm(t0, 0x64646464u, 0x4341)), k1024);
      __half2 q2 = __hsub2(as_h2(__byte_perm(t1, 0x64646464u, 0x4240)), k1024);
      __half2 q3 = __hsub2(as_h2(__byte_perm(t1, 0x64646464u, 0x4341)), k1024);
      a0 = __hfma2(q0, as_h2(xv.x), a0);
      a1 = __hfma2(q1, as_h2(xv.y), a1);
      a0 = __hfma2(q2, as_h2(xv.z), a0);
      a1 = __hfma2(q3, as_h2(xv.w), a1);
    }
  }
  float2 f = __half22float2(__hadd2(a0, a1));
  return f.x + f.y;
}

template <int kBits>
__device__ __forceinline__ float chunk_dot_f32(const uint4& p, const uint4* xs, int stride) {
  const float4* xf = reinterpret_cast<const float4*>(xs);
  constexpr float kMagic = 8388608.0f;
  float a0 = 0.0f;
  float a1 = 0.0f;
  const uint32_t wv[4] = {p.x, p.y, p.z, p.w};
  if constexpr (kBits == 4) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t t = wv[j];
      const uint32_t t16 = t >> 16;
      const float4 x0 = xf[(2 * j) * stride];
      const float4 x1 = xf[(2 * j + 1) * stride];
      a0 = fmaf(__uint_as_float((t & 0xFu) | 0x4B000000u) - kMagic, x0.x, a0);
      a1 = fmaf(__uint_as_float((t & 0xF0u) | 0x4B000000u) - kMagic, x0.y, a1);
      a0 = fmaf(__uint_as_float((t & 0xF00u) | 0x4B000000u) - kMagic, x0.z, a0);
      a1 = fmaf(__uint_as_float((t & 0xF000u) | 0x4B000000u) - kMagic, x0.w, a1);
      a0 = fmaf(__uint_as_float((t16 & 0xFu) | 0x4B000000u) - kMagic, x1.x, a0);
      a1 = fmaf(__uint_as_float((t16 & 0xF0u) | 0x4B000000u) - kMagic, x1.y, a1);
      a0 = fmaf(__uint_as_float((t16 & 0xF00u) | 0x4B000000u) - kMagic, x1.z, a0);
      a1 = fmaf(__uint_as_float((t16 & 0xF000u) | 0x4B000000u) - kMagic, x1.w, a1);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t t = wv[j];
      const float4 x0 = xf[j * stride];
      a0 = fmaf(__uint_as_float(__byte_perm(t, 0x4B000000u, 0x7540)) - kMagic, x0.x, a0);
      a1 = fmaf(__uint_as_float(__byte_perm(t, 0x4B000000u, 0x7541)) - kMagic, x0.y, a1);
      a0 = fmaf(__uint_as_float(__byte_perm(t, 0x4B000000u, 0x7542)) - kMagic, x0.z, a0);
      a1 = fmaf(__uint_as_float(__byte_perm(t, 0x4B000000u, 0x7543)) - kMagic, x0.w, a1);
    }
  }
  return a0 + a1;
}

// kSplit warps share one row (each takes every kSplit-th run of 32 chunks); kUnroll chunks
// per lane are loaded before any is used.
template <int kBits, int kRows, typename ScaleT, typename OutT, int kSplit, int kUnroll, bool kF32>
__global__ void __launch_bounds__(kThreads, 4)
    gemv_h2_kernel(AffineQuantWeight w, const Bf16* x, int64_t ldx, OutT* y, int64_t ldy) {
  using T = H2<kBits, kF32>;
  constexpr int kRowsPerTile = kWarps / kSplit;
  constexpr int kStride = 32 * kSplit;
  extern __shared__ uint4 smem[];
  __shared__ float partial[kWarps][kRows];
  const int chunks = w.k / T::kPerChunk;
  uint4* xs = smem;
  float2* stats = reinterpret_cast<float2*>(smem + kRows * T::kSlots * chunks);
  stage_x<kBits, kF32>(x, ldx, kRows, chunks, xs, stats);
  __syncthreads();

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int sub = warp % kSplit;
  const int vl = sub * 32 + lane;
  const int group_shift = __ffs(w.group_size / T::kPerChunk) - 1;
  const int groups = w.k / w.group_size;
  const int tiles = (w.n + kRowsPerTile - 1) / kRowsPerTile;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int n = tile * kRowsPerTile + warp / kSplit;
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    if (n < w.n) {
      const uint4* wrow = reinterpret_cast<const uint4*>(w.packed) + int64_t(n) * chunks;
      const ScaleT* srow = static_cast<const ScaleT*>(w.scales) + int64_t(n) * groups;
      const ScaleT* brow = static_cast<const ScaleT*>(w.biases) + int64_t(n) * groups;
      for (int c0 = vl; c0 < chunks; c0 += kStride * kUnroll) {
        uint4 p[kUnroll];
        float s[kUnroll];
        float b[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + u * kStride;
          if (c < chunks) {
            p[u] = detail::load_stream16(wrow + c);
            s[u] = to_f(srow[c >> group_shift]);
            b[u] = to_f(brow[c >> group_shift]);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + u * kStride;
          if (c < chunks) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              const uint4* xr = xs + r * T::kSlots * chunks + c;
              float dot;
              if constexpr (kF32) {
                dot = chunk_dot_f32<kBits>(p[u], xr, chunks);
              } else {
                dot = chunk_dot_h2<kBits>(p[u], xr, chunks);
              }
              float2 st = stats[r * chunks + c];
              acc[r] = fmaf(s[u] * st.x, dot, fmaf(b[u], st.y, acc[r]));
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    }
    if constexpr (kSplit > 1) {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) partial[warp][r] = acc[r];
      }
      __syncthreads();
      if (sub == 0 && lane == 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float v = 0.0f;
#pragma unroll
          for (int i = 0; i < kSplit; ++i) v += partial[warp + i][r];
          acc[r] = v;
        }
      }
      __syncthreads();
    }
    if (sub == 0 && lane == 0 && n < w.n) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if constexpr (sizeof(OutT) == 4) {
          y[r * ldy + n] = acc[r];
        } else {
          y[r * ldy + n] = __float2bfloat16(acc[r]);
        }
      }
    }
  }
}

template <int kBits, int kSplit, int kUnroll, bool kF32, typename OutT>
void launch_h2(const AffineQuantWeight& w, const Bf16* x, int64_t ldx, OutT* y, int64_t ldy,
               int sm_count, int blocks_per_sm, cudaStream_t st) {
  using T = H2<kBits, kF32>;
  const int chunks = w.k / T::kPerChunk;
  size_t smem = size_t(chunks) * (T::kSlots * 16 + 8);
  const int tiles = (w.n + kWarps / kSplit - 1) / (kWarps / kSplit);
  int grid = blocks_per_sm > 0 ? std::min(tiles, sm_count * blocks_per_sm) : tiles;
  auto kernel = gemv_h2_kernel<kBits, 1, Bf16, OutT, kSplit, kUnroll, kF32>;
  if (smem > 48 * 1024) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  kernel<<<grid, kThreads, smem, st>>>(w, x, ldx, y, ldy);
  CK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Variant "async" (W2): the h2 math, but each warp streams its rows through a ring of
// kStages stages in shared memory filled by cp.async (16 B of weights + the bf16 pairs of
// scales and biases holding the chunk's group, per lane and stage), so loads stay in flight
// while the warp computes and no registers hold them. The first kStages stages go out
// before x is staged. m = 1, bf16 scales, an even number of groups per row.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

template <int kBits, typename OutT, int kStages>
__global__ void __launch_bounds__(kThreads)
    gemv_async_kernel(AffineQuantWeight w, const Bf16* x, int64_t ldx, OutT* y) {
  using T = H2<kBits>;
  extern __shared__ uint4 smem[];
  const int chunks = w.k / T::kPerChunk;
  const int groups = w.k / w.group_size;
  const int shift = __ffs(w.group_size / T::kPerChunk) - 1;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int per_row = (chunks + 31) / 32;
  const int row_step = gridDim.x * kWarps;
  const int row0 = blockIdx.x * kWarps + warp;
  uint4* ring_w = smem;  // [warps][stages][32]
  uint32_t* ring_s = reinterpret_cast<uint32_t*>(ring_w + kWarps * kStages * 32);
  uint32_t* ring_b = ring_s + kWarps * kStages * 32;
  uint4* xs = reinterpret_cast<uint4*>(ring_b + kWarps * kStages * 32);
  float2* stats = reinterpret_cast<float2*>(xs + T::kSlots * chunks);
  const uint4* packed = reinterpret_cast<const uint4*>(w.packed);
  const uint16_t* scales = static_cast<const uint16_t*>(w.scales);
  const uint16_t* biases = static_cast<const uint16_t*>(w.biases);

  auto issue = [&](int t) {
    const int ri = t / per_row;
    const int i = t - ri * per_row;
    const int row = row0 + ri * row_step;
    const int c = lane + 32 * i;
    const int slot = (warp * kStages + t % kStages) * 32 + lane;
    if (row < w.n && c < chunks) {
      cp_async16(ring_w + slot, packed + int64_t(row) * chunks + c);
      const int64_t gi = int64_t(row) * groups + ((c >> shift) & ~1);
      cp_async4(ring_s + slot, scales + gi);
      cp_async4(ring_b + slot, biases + gi);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int t = 0; t < kStages; ++t) issue(t);
  stage_x<kBits, false>(x, ldx, 1, chunks, xs, stats);
  __syncthreads();

  float acc = 0.0f;
  for (int t = 0;; ++t) {
    const int ri = t / per_row;
    const int i = t - ri * per_row;
    const int row = row0 + ri * row_step;
    if (row >= w.n) break;
    cp_async_wait<kStages - 1>();
    const int c = lane + 32 * i;
    if (c < chunks) {
      const int slot = (warp * kStages + t % kStages) * 32 + lane;
      const uint4 p = ring_w[slot];
      const uint32_t sp = ring_s[slot];
      const uint32_t bp = ring_b[slot];
      const bool odd = (c >> shift) & 1;
      const float sv = __uint_as_float(odd ? sp & 0xFFFF0000u : sp << 16);
      const float bv = __uint_as_float(odd ? bp & 0xFFFF0000u : bp << 16);
      const float dot = chunk_dot_h2<kBits>(p, xs + c, chunks);
      const float2 st = stats[c];
      acc = fmaf(sv * st.x, dot, fmaf(bv, st.y, acc));
    }
    issue(t + kStages);
    if (i == per_row - 1) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) {
        if constexpr (sizeof(OutT) == 4) {
          y[row] = acc;
        } else {
          y[row] = __float2bfloat16(acc);
        }
      }
      acc = 0.0f;
    }
  }
  cp_async_wait<0>();
}

template <int kBits, int kStages, typename OutT>
void launch_async(const AffineQuantWeight& w, const Bf16* x, int64_t ldx, OutT* y, int sm_count,
                  cudaStream_t st) {
  using T = H2<kBits>;
  const int chunks = w.k / T::kPerChunk;
  const size_t smem = size_t(kWarps) * kStages * 32 * 24 + size_t(chunks) * (T::kSlots * 16 + 8);
  auto kernel = gemv_async_kernel<kBits, OutT, kStages>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const int grid = std::min((w.n + kWarps - 1) / kWarps, sm_count * std::max(1, per_sm));
  kernel<<<grid, kThreads, smem, st>>>(w, x, ldx, y);
  CK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------
// Dequantize to bf16: baseline (src) vs one 16-byte packed chunk per thread, 16-byte stores.
template <int kBits>
__global__ void dequant_v1_kernel(AffineQuantWeight w, Bf16* out, int64_t ld_out) {
  constexpr int kPer = 128 / kBits;
  const int chunks = w.k / kPer;
  const int groups = w.k / w.group_size;
  const int64_t total = int64_t(chunks) * w.n;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = idx / chunks;
    const int c = int(idx - n * chunks);
    const uint4 p = detail::load_stream16(reinterpret_cast<const uint4*>(w.packed) + idx);
    const int g = c * kPer / w.group_size;
    const float s = to_f(static_cast<const Bf16*>(w.scales)[n * groups + g]);
    const float b = to_f(static_cast<const Bf16*>(w.biases)[n * groups + g]);
    const uint32_t wv[4] = {p.x, p.y, p.z, p.w};
    uint4* dst = reinterpret_cast<uint4*>(out + n * ld_out + int64_t(c) * kPer);
    constexpr int kPerWord = 32 / kBits;
    constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
    for (int i = 0; i < kPer / 8; ++i) {
      uint32_t o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int v0 = i * 8 + 2 * j;
        const int v1 = v0 + 1;
        float f0 = s * float((wv[v0 / kPerWord] >> (kBits * (v0 % kPerWord))) & kMask) + b;
        float f1 = s * float((wv[v1 / kPerWord] >> (kBits * (v1 % kPerWord))) & kMask) + b;
        __nv_bfloat162 h = __floats2bfloat162_rn(f0, f1);
        o[j] = *reinterpret_cast<uint32_t*>(&h);
      }
      __stcs(dst + i, make_uint4(o[0], o[1], o[2], o[3]));
    }
  }
}

// ---------------------------------------------------------------------------------------
struct QMat {
  DeviceBuffer packed, sb;
  int n = 0, k = 0, bits = 4;
  AffineQuantWeight weight() const {
    const int groups = k / 64;
    return AffineQuantWeight{packed.as<uint32_t>(),
                             sb.as<Bf16>(),
                             sb.as<Bf16>() + size_t(n) * groups,
                             false,
                             n,
                             k,
                             bits,
                             64};
  }
  size_t bytes() const { return size_t(n) * k * bits / 8 + size_t(n) * (k / 64) * 4; }
};

class Lab {
 public:
  Lab() {
    CK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    CK(cudaGetDeviceProperties(&props_, 0));
    sms_ = props_.multiProcessorCount;
  }
  ~Lab() { cudaStreamDestroy(st_); }

  DeviceBuffer raw(size_t bytes) { return DeviceBuffer(bytes); }
  DeviceBuffer bf16(size_t n, float scale) {
    DeviceBuffer b = raw(n * 2 + 16);
    CK(fill_random_bf16(b.as<Bf16>(), n, seed_++, scale, st_));
    return b;
  }
  QMat qmat(int n, int k, int bits) {
    QMat q;
    q.n = n;
    q.k = k;
    q.bits = bits;
    q.packed = raw(size_t(n) * k * bits / 8 + 16);
    CK(fill_random_u32(q.packed.as<uint32_t>(), size_t(n) * k * bits / 32, seed_++, st_));
    // Scales ~0.01 (uniform +-), biases ~0.08: the MLX ranges for a unit-variance weight.
    q.sb = raw(size_t(n) * (k / 64) * 4 + 16);
    CK(fill_random_bf16(q.sb.as<Bf16>(), size_t(n) * (k / 64), seed_++, 0.01f, st_));
    CK(fill_random_bf16(q.sb.as<Bf16>() + size_t(n) * (k / 64), size_t(n) * (k / 64), seed_++,
                        0.08f, st_));
    return q;
  }

  using GemvFn = std::function<void(const AffineQuantWeight&, const Bf16*, void*, bool)>;

  // Relative L2 error of fn's output against the reference kernel.
  double validate(const QMat& q, const DeviceBuffer& x, const GemvFn& fn, bool f32) {
    AffineQuantWeight w = q.weight();
    DeviceBuffer want = raw(size_t(q.n) * 4);
    DeviceBuffer got = raw(size_t(q.n) * 4);
    CK(cudaMemsetAsync(got.data(), 0xff, size_t(q.n) * 4, st_));
    ref_kernel<<<(q.n + kWarps - 1) / kWarps, kThreads, 0, st_>>>(w, x.as<Bf16>(), q.k, 1,
                                                                  want.as<float>(), q.n);
    CK(cudaGetLastError());
    fn(w, x.as<Bf16>(), got.data(), f32);
    std::vector<float> a(q.n);
    std::vector<float> b(q.n);
    CK(cudaMemcpyAsync(a.data(), want.data(), size_t(q.n) * 4, cudaMemcpyDeviceToHost, st_));
    if (f32) {
      CK(cudaMemcpyAsync(b.data(), got.data(), size_t(q.n) * 4, cudaMemcpyDeviceToHost, st_));
      CK(cudaStreamSynchronize(st_));
    } else {
      std::vector<Bf16> h(q.n);
      CK(cudaMemcpyAsync(h.data(), got.data(), size_t(q.n) * 2, cudaMemcpyDeviceToHost, st_));
      CK(cudaStreamSynchronize(st_));
      for (int i = 0; i < q.n; ++i) b[i] = __bfloat162float(h[i]);
    }
    double num = 0, den = 0;
    for (int i = 0; i < q.n; ++i) {
      if (!std::isfinite(b[i])) return INFINITY;
      num += double(a[i] - b[i]) * (a[i] - b[i]);
      den += double(a[i]) * a[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }

  void gemv_shape(int n, int k, int bits, double copy_bw,
                  const std::vector<std::pair<std::string, GemvFn>>& variants) {
    std::vector<QMat> copies;
    QMat first = qmat(n, k, bits);
    const size_t bytes = first.bytes();
    const int count = std::max<int>(2, int((size_t{400} << 20) / bytes) + 1);
    copies.push_back(std::move(first));
    for (int i = 1; i < count; ++i) copies.push_back(qmat(n, k, bits));
    DeviceBuffer x = bf16(k, 1.0f);
    DeviceBuffer y = raw(size_t(n) * 4 + 16);
    double base_us = 0;
    for (const auto& variant : variants) {
      const std::string& name = variant.first;
      const GemvFn& fn = variant.second;
      const bool f32 = logits_shape(n);
      double err = validate(copies[0], x, fn, f32);
      const double tol = f32 ? 2e-3 : 5e-3;
      if (!(err < tol)) {
        std::printf("  %-22s %d-bit n=%6d k=%5d: FAILED validation rel err %.2e (tol %.0e)\n",
                    name.c_str(), bits, n, k, err, tol);
        std::fflush(stdout);
        continue;
      }
      // A graph of back-to-back launches over the rotating copies (as in a decode step:
      // no launch gaps), time per launch.
      const int chain = std::max<int>(16, int(copies.size()));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < chain; ++i) {
        fn(copies[i % copies.size()].weight(), x.as<Bf16>(), y.data(), f32);
      }
      CK(cudaStreamEndCapture(st_, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      double ms = median_ms(
                      st_, [&](int) { CK(cudaGraphLaunch(exec, st_)); }, 10, 2) /
                  chain;
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      double bw = bytes / (ms * 1e-3);
      if (base_us == 0) base_us = ms * 1e3;
      std::printf(
          "  %-22s %d-bit n=%6d k=%5d: %7.2f us/launch in a graph chain  %.3f TB/s  %3.0f%% of "
          "copy  x%.2f vs base  "
          "(rel err %.1e)\n",
          name.c_str(), bits, n, k, ms * 1e3, bw / 1e12, 100 * bw / copy_bw, base_us / (ms * 1e3),
          err);
      std::fflush(stdout);
    }
  }

  // The tensor-core kernel on its row-major weights against the same weights relaid by
  // affine_tile (kTiledPlain: each warp chunk 2 KB contiguous in lane order, 4 coalesced
  // 16-byte loads a lane instead of 8 scattered 8-byte ones, the chunk's scales and biases
  // right after it): graph chains alternated twice, outputs compared bit for bit.
  void tiled_shape(int n, int k, double copy_bw) {
    std::vector<QMat> copies;
    QMat first = qmat(n, k, 4);
    const size_t bytes = first.bytes();
    const int count = std::max<int>(2, int((size_t{400} << 20) / bytes) + 1);
    copies.push_back(std::move(first));
    for (int i = 1; i < count; ++i) copies.push_back(qmat(n, k, 4));
    std::vector<DeviceBuffer> bufs;
    std::vector<AffineQuantWeight> row_major, tiled;
    for (const QMat& q : copies) {
      const AffineQuantWeight w = q.weight();
      row_major.push_back(w);
      bufs.push_back(raw(affine_tiled_bytes(w, AffineLayout::kTiledPlain)));
      CK(affine_tile(w, AffineLayout::kTiledPlain, 0, bufs.back().data(), st_));
      tiled.push_back(affine_tiled_view(w, AffineLayout::kTiledPlain, 0, bufs.back().data()));
    }
    DeviceBuffer x = bf16(k, 1.0f);
    DeviceBuffer y = raw(size_t(n) * 4 + 16);
    const bool f32 = logits_shape(n);
    auto launch = [&](const AffineQuantWeight& w) {
      AffineGemvArgs a;
      a.w = w;
      a.x = x.as<Bf16>();
      a.ldx = k;
      a.y = y.data();
      a.ldy = n;
      a.y_f32 = f32;
      a.m = 1;
      a.sm_count = sms_;
      a.kernel = AffineGemvKernel::kTensorCore;
      CK(affine_gemv(a, st_));
    };
    const size_t out_bytes = size_t(n) * (f32 ? 4 : 2);
    std::vector<unsigned char> want(out_bytes), got(out_bytes);
    for (auto* ws : {&row_major, &tiled}) {
      CK(cudaMemsetAsync(y.data(), 0, out_bytes, st_));
      launch((*ws)[0]);
      CK(cudaMemcpyAsync(ws == &row_major ? want.data() : got.data(), y.data(), out_bytes,
                         cudaMemcpyDeviceToHost, st_));
    }
    CK(cudaStreamSynchronize(st_));
    std::printf("  tiled n=%6d k=%5d: outputs %s\n", n, k,
                want == got ? "identical" : "DIFFER (bits)");
    const int chain = std::max<int>(16, int(copies.size()));
    for (int round = 0; round < 2; ++round) {
      for (auto* ws : {&row_major, &tiled}) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < chain; ++i) launch((*ws)[i % ws->size()]);
        CK(cudaStreamEndCapture(st_, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        const double us = median_ms(
                              st_, [&](int) { CK(cudaGraphLaunch(exec, st_)); }, 10, 2) /
                          chain * 1e3;
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        const double bw = bytes / (us * 1e-6);
        std::printf("  %-16s n=%6d k=%5d: %7.2f us/launch  %.3f TB/s  %3.0f%% of copy\n",
                    ws == &row_major ? "tensor row-major" : "tensor tiled", n, k, us, bw / 1e12,
                    100 * bw / copy_bw);
      }
    }
    std::fflush(stdout);
  }

  // lm_head's shape: the GEMV writes f32 logits.
  static bool logits_shape(int n) { return n > 100000; }

  // One plain launch of each variant per shape, nothing else (LAB_NCU=1): a run for Nsight
  // Compute, which replays each kernel with the caches flushed and reads its counters.
  void profile_shape(int n, int k, int bits,
                     const std::vector<std::pair<std::string, GemvFn>>& variants) {
    QMat q = qmat(n, k, bits);
    DeviceBuffer x = bf16(k, 1.0f);
    DeviceBuffer y = raw(size_t(n) * 4 + 16);
    const bool f32 = logits_shape(n);
    for (const auto& variant : variants) {
      variant.second(q.weight(), x.as<Bf16>(), y.data(), f32);
      CK(cudaStreamSynchronize(st_));
      std::printf("  profiled %-22s n=%6d k=%5d\n", variant.first.c_str(), n, k);
    }
  }

  // src over the gtest-like cases: every bits / group / scale type, 1-8 x rows,
  // odd n and k, row batching, bf16 and f32 outputs, x with outliers; plus its dequantize
  // against the src one (bit-exact).
  int sweep_src() {
    struct Case {
      int bits, group, n, k, m;
      bool f16, outliers;
    };
    const Case cases[] = {
        {4, 64, 769, 4160, 1, false, false},   {4, 32, 5125, 1024, 3, true, false},
        {4, 128, 1024, 5120, 8, false, false}, {8, 64, 769, 4160, 2, false, false},
        {8, 32, 333, 2080, 5, true, false},    {8, 128, 4096, 1024, 1, false, false},
        {4, 64, 17001, 1024, 1, false, false}, {8, 32, 9001, 2048, 4, true, false},
        {4, 64, 96, 14336, 8, false, false},   {8, 128, 65, 30720, 7, false, false},
        {4, 64, 512, 4096, 2, false, true},    {8, 64, 512, 4096, 1, true, true},
        {4, 64, 6144, 4096, 1, false, false},  {4, 64, 4096, 14336, 1, false, true}};
    int failures = 0;
    for (const Case& c : cases) {
      const int groups = c.k / c.group;
      DeviceBuffer packed = raw(size_t(c.n) * c.k * c.bits / 8 + 16);
      CK(fill_random_u32(packed.as<uint32_t>(), size_t(c.n) * c.k * c.bits / 32, seed_++, st_));
      DeviceBuffer sb = raw(size_t(c.n) * groups * 4 + 16);
      {
        // Scales ~0.01, biases ~0.08, as bf16 or f16 (converted on the host).
        std::vector<Bf16> h(size_t(c.n) * groups * 2);
        DeviceBuffer tmp = bf16(h.size(), 1.0f);
        CK(cudaMemcpyAsync(h.data(), tmp.data(), h.size() * 2, cudaMemcpyDeviceToHost, st_));
        CK(cudaStreamSynchronize(st_));
        std::vector<uint16_t> out(h.size());
        for (size_t i = 0; i < h.size(); ++i) {
          float v = __bfloat162float(h[i]) * (i < h.size() / 2 ? 0.01f : 0.08f);
          if (c.f16) {
            __half t = __float2half(v);
            out[i] = *reinterpret_cast<uint16_t*>(&t);
          } else {
            Bf16 t = __float2bfloat16(v);
            out[i] = *reinterpret_cast<uint16_t*>(&t);
          }
        }
        CK(cudaMemcpy(sb.data(), out.data(), out.size() * 2, cudaMemcpyHostToDevice));
      }
      AffineQuantWeight w{packed.as<uint32_t>(),
                          sb.data(),
                          static_cast<uint16_t*>(sb.data()) + size_t(c.n) * groups,
                          c.f16,
                          c.n,
                          c.k,
                          c.bits,
                          c.group};
      const int64_t ldx = c.k + 8;
      const int64_t ldy = c.n + 1;
      DeviceBuffer x = bf16(size_t(c.m) * ldx, 2.0f);
      if (c.outliers) {
        std::vector<Bf16> hx(c.k);
        CK(cudaMemcpy(hx.data(), x.data(), c.k * 2, cudaMemcpyDeviceToHost));
        hx[5] = __float2bfloat16(3000.0f);
        for (int i = 64; i < 96; ++i) hx[i] = __float2bfloat16(0.0f);
        for (int i = 96; i < 128; ++i) hx[i] = __float2bfloat16(__bfloat162float(hx[i]) * 1e-30f);
        CK(cudaMemcpy(x.data(), hx.data(), c.k * 2, cudaMemcpyHostToDevice));
      }
      DeviceBuffer want = raw(size_t(c.m) * ldy * 4);
      ref_kernel<<<(c.n + kWarps - 1) / kWarps, kThreads, 0, st_>>>(w, x.as<Bf16>(), ldx, c.m,
                                                                    want.as<float>(), ldy);
      CK(cudaGetLastError());
      std::vector<float> ref(size_t(c.m) * ldy);
      CK(cudaMemcpyAsync(ref.data(), want.data(), ref.size() * 4, cudaMemcpyDeviceToHost, st_));
      double errs[2] = {0, 0};
      for (int f32 = 0; f32 < 2; ++f32) {
        DeviceBuffer y = raw(size_t(c.m) * ldy * 4);
        CK(cudaMemsetAsync(y.data(), 0xff, size_t(c.m) * ldy * 4, st_));
        CK(affine_gemv(w, x.as<Bf16>(), ldx, c.m, y.data(), ldy, f32 == 1, sms_, st_));
        std::vector<float> got(size_t(c.m) * ldy);
        if (f32) {
          CK(cudaMemcpyAsync(got.data(), y.data(), got.size() * 4, cudaMemcpyDeviceToHost, st_));
          CK(cudaStreamSynchronize(st_));
        } else {
          std::vector<Bf16> h(got.size());
          CK(cudaMemcpyAsync(h.data(), y.data(), h.size() * 2, cudaMemcpyDeviceToHost, st_));
          CK(cudaStreamSynchronize(st_));
          for (size_t i = 0; i < h.size(); ++i) got[i] = __bfloat162float(h[i]);
        }
        double num = 0, den = 0;
        for (int r = 0; r < c.m; ++r) {
          for (int i = 0; i < c.n; ++i) {
            double a = ref[r * ldy + i], b = got[r * ldy + i];
            if (!std::isfinite(b)) num = INFINITY;
            num += (a - b) * (a - b);
            den += a * a;
          }
        }
        errs[f32] = std::sqrt(num / std::max(den, 1e-30));
      }
      const size_t diff = 0;  // dequantize: gtests (kernels/ref) and dequant_shape
      const bool ok = errs[0] < 4e-3 && errs[1] < 1.5e-3 && diff == 0;
      failures += !ok;
      std::printf(
          "  check %d-bit g%-3d n=%5d k=%5d m=%d %s%s: rel err bf16 out %.2e (tol 4e-3), f32 out "
          "%.2e (tol 1.5e-3); dequantize differs in %zu values  %s\n",
          c.bits, c.group, c.n, c.k, c.m, c.f16 ? "f16" : "bf16", c.outliers ? " outliers" : "",
          errs[0], errs[1], diff, ok ? "ok" : "FAILED");
      std::fflush(stdout);
    }
    return failures;
  }

  // src's fused forms against the unfused kernels: RMSNorm prologue (bit-exact
  // with rmsnorm_residual + the plain GEMV), residual-add epilogue (bit-exact with a host
  // add), gated SiLU (against GEMV + gated_activation: the split may differ, so a tolerance),
  // and PDL launches (bit-exact with plain ones).
  int check_fused(int bits, int n, int k, int m) {
    QMat q = qmat(2 * n, k, bits);
    AffineQuantWeight w2 = q.weight();  // [2n, k]
    AffineQuantWeight w1 = w2;
    w1.n = n;  // the gate half as a plain [n, k] weight
    DeviceBuffer x = bf16(size_t(m) * k, 3.0f);
    DeviceBuffer g = bf16(k, 1.0f);
    DeviceBuffer xn = raw(size_t(m) * k * 2);
    DeviceBuffer y0 = raw(size_t(m) * 2 * n * 2), y1 = raw(size_t(m) * 2 * n * 2);
    auto fetch = [&](const DeviceBuffer& b, size_t count) {
      std::vector<uint16_t> h(count);
      CK(cudaMemcpyAsync(h.data(), b.data(), count * 2, cudaMemcpyDeviceToHost, st_));
      CK(cudaStreamSynchronize(st_));
      return h;
    };
    auto bf = [](uint16_t v) {
      uint32_t bits = uint32_t(v) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    };
    int failures = 0;
    // 1. norm prologue, with and without PDL.
    CK(rmsnorm_residual(nullptr, k, x.as<Bf16>(), k, g.as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), k, m,
                        k, st_));
    CK(affine_gemv(w1, xn.as<Bf16>(), k, m, y0.data(), n, false, sms_, st_));
    AffineGemvArgs a;
    a.w = w1;
    a.x = x.as<Bf16>();
    a.ldx = k;
    a.y = y1.data();
    a.ldy = n;
    a.norm_weight = g.as<Bf16>();
    a.m = m;
    a.sm_count = sms_;
    size_t diff_norm[2] = {0, 0};
    for (int pdl = 0; pdl < 2; ++pdl) {
      a.pdl = pdl == 1 && props_.major >= 9;
      CK(cudaMemsetAsync(y1.data(), 0xff, size_t(m) * n * 2, st_));
      CK(affine_gemv(a, st_));
      auto h0 = fetch(y0, size_t(m) * n), h1 = fetch(y1, size_t(m) * n);
      for (size_t i = 0; i < h0.size(); ++i) diff_norm[pdl] += h0[i] != h1[i];
    }
    // 2. residual add: y1 = resid; y1 += bf16(x · w).
    DeviceBuffer resid = bf16(size_t(m) * n, 4.0f);
    auto hr = fetch(resid, size_t(m) * n);
    CK(cudaMemcpyAsync(y1.data(), resid.data(), size_t(m) * n * 2, cudaMemcpyDeviceToDevice, st_));
    a.norm_weight = nullptr;
    a.pdl = false;
    a.epilogue = GemvEpilogue::kResidualAdd;
    CK(affine_gemv(a, st_));
    CK(affine_gemv(w1, x.as<Bf16>(), k, m, y0.data(), n, false, sms_, st_));
    size_t diff_resid = 0;
    {
      auto h0 = fetch(y0, size_t(m) * n), h1 = fetch(y1, size_t(m) * n);
      for (size_t i = 0; i < h0.size(); ++i) {
        Bf16 want = __float2bfloat16(bf(hr[i]) + bf(h0[i]));
        diff_resid += *reinterpret_cast<uint16_t*>(&want) != h1[i];
      }
    }
    // 3. gated SiLU on [2n, k] against GEMV [2n] + gated_activation.
    double gated_err = INFINITY;
    if (m <= 4) {
      CK(affine_gemv(w2, x.as<Bf16>(), k, m, y0.data(), 2 * n, false, sms_, st_));
      DeviceBuffer act = raw(size_t(m) * n * 2);
      CK(gated_activation(GatedActivation::kSilu, y0.as<Bf16>(), 2 * n, y0.as<Bf16>() + n, 2 * n,
                          act.as<Bf16>(), n, m, n, st_));
      a.w = w2;
      a.epilogue = GemvEpilogue::kGatedSilu;
      a.pdl = props_.major >= 9;
      CK(affine_gemv(a, st_));
      auto h0 = fetch(act, size_t(m) * n), h1 = fetch(y1, size_t(m) * n);
      double num = 0, den = 0;
      for (size_t i = 0; i < h0.size(); ++i) {
        double d = bf(h0[i]) - bf(h1[i]);
        num += d * d;
        den += double(bf(h0[i])) * bf(h0[i]);
      }
      gated_err = std::sqrt(num / std::max(den, 1e-30));
    }
    const bool ok =
        diff_norm[0] == 0 && diff_norm[1] == 0 && diff_resid == 0 && (m > 4 || gated_err < 8e-3);
    failures += !ok;
    std::printf(
        "  fused %d-bit n=%d k=%d m=%d: norm prologue differs in %zu (pdl: %zu) of %zu, "
        "residual add differs in %zu, gated silu rel err %.2e  %s\n",
        bits, n, k, m, diff_norm[0], diff_norm[1], size_t(m) * n, diff_resid, gated_err,
        ok ? "ok" : "FAILED");
    std::fflush(stdout);
    return failures;
  }

  void dequant_shape(int n, int k, int bits, double copy_bw) {
    QMat q = qmat(n, k, bits);
    AffineQuantWeight w = q.weight();
    DeviceBuffer a = raw(size_t(n) * k * 2 + 16);
    DeviceBuffer b = raw(size_t(n) * k * 2 + 16);
    CK(affine_dequantize(w, a.as<Bf16>(), k, st_));
    const int chunks_total = int(std::min<int64_t>(int64_t(n) * k * bits / 128, 1 << 30));
    auto v1 = [&](int) {
      int blocks = std::min((chunks_total + 255) / 256, sms_ * 8);
      if (bits == 4) {
        dequant_v1_kernel<4><<<blocks, 256, 0, st_>>>(w, b.as<Bf16>(), k);
      } else {
        dequant_v1_kernel<8><<<blocks, 256, 0, st_>>>(w, b.as<Bf16>(), k);
      }
      CK(cudaGetLastError());
    };
    v1(0);
    std::vector<uint16_t> ha(size_t(n) * k), hb(size_t(n) * k);
    CK(cudaMemcpyAsync(ha.data(), a.data(), ha.size() * 2, cudaMemcpyDeviceToHost, st_));
    CK(cudaMemcpyAsync(hb.data(), b.data(), hb.size() * 2, cudaMemcpyDeviceToHost, st_));
    CK(cudaStreamSynchronize(st_));
    size_t diff = 0;
    for (size_t i = 0; i < ha.size(); ++i) diff += ha[i] != hb[i];
    const double bytes = q.bytes() + double(n) * k * 2;
    double base = median_ms(st_, [&](int) { CK(affine_dequantize(w, a.as<Bf16>(), k, st_)); });
    double fast = median_ms(st_, v1);
    std::printf(
        "  dequantize %d-bit n=%d k=%d: base %.1f us (%.0f%% of copy), v1 %.1f us (%.0f%% of "
        "copy) x%.2f; v1 differs from base in %zu of %zu values%s\n",
        bits, n, k, base * 1e3, 100 * bytes / (base * 1e-3) / copy_bw, fast * 1e3,
        100 * bytes / (fast * 1e-3) / copy_bw, base / fast, diff, ha.size(),
        diff ? "  FAILED" : "");
    std::fflush(stdout);
  }

  cudaDeviceProp props_{};
  cudaStream_t st_ = nullptr;
  int sms_ = 0;
  uint64_t seed_ = 7;
};

// ---------------------------------------------------------------------------------------
// An 8B-shaped 4-bit decode step: the GEMVs under test + the existing other kernels,
// captured once in a CUDA graph and replayed.
struct Shape8B {
  int hidden = 4096, layers = 32, q_heads = 32, kv_heads = 8, hd = 128, inter = 14336;
  int vocab = 128256;
  int qkv() const { return (q_heads + 2 * kv_heads) * hd; }
};

// The median time of one replay of a graph captured from body (20 timed, 3 warm-up).
double graph_replay_ms(cudaStream_t st, const std::function<void()>& body) {
  const CapturedGraph graph(st, body);
  return median_ms(
      st, [&](int) { graph.launch(); }, 20, 3);
}

void decode_step(Lab& lab, double copy_bw,
                 const std::vector<std::pair<std::string, Lab::GemvFn>>& variants) {
  const Shape8B s;
  cudaStream_t st = lab.st_;
  std::vector<QMat> qkv, o, gu, down;
  std::vector<DeviceBuffer> norm1, norm2, kc, vc;
  // LAB_CTX: the keys before the step's own (default 128, the benchmark's prompt).
  const char* ctx_env = std::getenv("LAB_CTX");
  const int start = ctx_env != nullptr ? std::max(1, std::atoi(ctx_env)) : 128;
  const int max_ctx = std::max(256, (start + 16) / 16 * 16);
  std::printf("  decode step context: %d keys\n", start + 1);
  for (int l = 0; l < s.layers; ++l) {
    qkv.push_back(lab.qmat(s.qkv(), s.hidden, 4));
    o.push_back(lab.qmat(s.hidden, s.q_heads * s.hd, 4));
    gu.push_back(lab.qmat(2 * s.inter, s.hidden, 4));
    down.push_back(lab.qmat(s.hidden, s.inter, 4));
    norm1.push_back(lab.bf16(s.hidden, 1.0f));
    norm2.push_back(lab.bf16(s.hidden, 1.0f));
    kc.push_back(lab.bf16(size_t(max_ctx) * s.kv_heads * s.hd, 1.0f));
    vc.push_back(lab.bf16(size_t(max_ctx) * s.kv_heads * s.hd, 1.0f));
  }
  QMat lm_head = lab.qmat(s.vocab, s.hidden, 4);
  DeviceBuffer final_norm = lab.bf16(s.hidden, 1.0f);
  DeviceBuffer resid = lab.bf16(s.hidden, 1.0f);
  DeviceBuffer xn = lab.raw(s.hidden * 2 + 16);
  DeviceBuffer qkv_out = lab.raw(s.qkv() * 2 + 16);
  DeviceBuffer q = lab.raw(s.hidden * 2 + 16);
  DeviceBuffer attn = lab.raw(s.hidden * 2 + 16);
  DeviceBuffer delta = lab.raw(s.hidden * 2 + 16);
  DeviceBuffer gu_out = lab.raw(2 * s.inter * 2 + 16);
  DeviceBuffer act = lab.raw(s.inter * 2 + 16);
  DeviceBuffer logits = lab.raw(size_t(s.vocab) * 4 + 16);
  DeviceBuffer token = lab.raw(16);
  auto upload = [&](const void* src, size_t bytes) {
    DeviceBuffer b = lab.raw(bytes + 16);
    CK(cudaMemcpy(b.data(), src, bytes, cudaMemcpyHostToDevice));
    return b;
  };
  int32_t pos = start;
  int64_t slot = start;
  std::vector<int32_t> table(max_ctx / 16);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  DeviceBuffer dpos = upload(&pos, 4), dslot = upload(&slot, 8);
  DeviceBuffer dtable = upload(table.data(), table.size() * 4);
  int32_t qs[2] = {0, 1};
  int32_t kl = start + 1;
  DeviceBuffer dqs = upload(qs, 8), dkl = upload(&kl, 4);
  std::vector<float> freqs(s.hd / 2);
  for (int i = 0; i < s.hd / 2; ++i) freqs[i] = 1.0f / std::pow(500000.0f, 2.0f * i / s.hd);
  DeviceBuffer dfreq = upload(freqs.data(), freqs.size() * 4);
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  DeviceBuffer dparams = upload(&greedy, sizeof(greedy));
  int splits = paged_attention_num_splits(1, s.q_heads, start + 1, lab.sms_);
  DeviceBuffer attn_ws = lab.raw(paged_attention_workspace_bytes(1, s.q_heads, s.hd, splits) + 16);
  double weight_bytes = 0;
  for (int l = 0; l < s.layers; ++l) {
    weight_bytes += qkv[l].bytes() + o[l].bytes() + gu[l].bytes() + down[l].bytes();
  }
  weight_bytes += lm_head.bytes();

  for (const auto& variant : variants) {
    const std::string& name = variant.first;
    const Lab::GemvFn& fn = variant.second;
    auto step = [&](int) {
      for (int l = 0; l < s.layers; ++l) {
        CK(rmsnorm_residual(l == 0 ? nullptr : delta.as<Bf16>(), s.hidden, resid.as<Bf16>(),
                            s.hidden, norm1[l].as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, 1,
                            s.hidden, st));
        fn(qkv[l].weight(), xn.as<Bf16>(), qkv_out.data(), false);
        RopeKvWriteArgs r;
        r.qkv = qkv_out.as<Bf16>();
        r.ld_qkv = s.qkv();
        r.positions = dpos.as<int32_t>();
        r.slots = dslot.as<int64_t>();
        r.inv_freq = dfreq.as<float>();
        r.q_out = q.as<Bf16>();
        r.ld_q_out = s.hidden;
        r.k_cache = kc[l].as<Bf16>();
        r.v_cache = vc[l].as<Bf16>();
        r.tokens = 1;
        r.q_heads = s.q_heads;
        r.kv_heads = s.kv_heads;
        r.head_dim = s.hd;
        r.rotary_dim = s.hd;
        CK(rope_kv_write(r, st));
        PagedAttentionArgs a;
        a.q = q.as<Bf16>();
        a.ld_q = s.hidden;
        a.k_cache = kc[l].as<Bf16>();
        a.v_cache = vc[l].as<Bf16>();
        a.block_tables = dtable.as<int32_t>();
        a.ld_block_tables = int64_t(table.size());
        a.query_start = dqs.as<int32_t>();
        a.kv_lens = dkl.as<int32_t>();
        a.out = attn.as<Bf16>();
        a.ld_out = s.hidden;
        a.seqs = 1;
        a.tokens = 1;
        a.q_heads = s.q_heads;
        a.kv_heads = s.kv_heads;
        a.head_dim = s.hd;
        a.block_size = 16;
        a.scale = 0.0884f;
        a.num_splits = splits;
        a.workspace = attn_ws.as<float>();
        CK(paged_attention(a, st));
        fn(o[l].weight(), attn.as<Bf16>(), delta.data(), false);
        CK(rmsnorm_residual(delta.as<Bf16>(), s.hidden, resid.as<Bf16>(), s.hidden,
                            norm2[l].as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, 1, s.hidden,
                            st));
        fn(gu[l].weight(), xn.as<Bf16>(), gu_out.data(), false);
        CK(gated_activation(GatedActivation::kSilu, gu_out.as<Bf16>(), 2 * s.inter,
                            gu_out.as<Bf16>() + s.inter, 2 * s.inter, act.as<Bf16>(), s.inter, 1,
                            s.inter, st));
        fn(down[l].weight(), act.as<Bf16>(), delta.data(), false);
      }
      CK(rmsnorm_residual(delta.as<Bf16>(), s.hidden, resid.as<Bf16>(), s.hidden,
                          final_norm.as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, 1, s.hidden,
                          st));
      fn(lm_head.weight(), xn.as<Bf16>(), logits.data(), true);
      SamplingArgs sa;
      sa.logits = logits.as<float>();
      sa.ld_logits = s.vocab;
      sa.rows = 1;
      sa.vocab = s.vocab;
      sa.params = dparams.as<SamplingRow>();
      sa.out_tokens = token.as<int32_t>();
      CK(sample_tokens(sa, st));
    };
    // GEMVs alone (same graph minus the other kernels) to split the step's time.
    auto gemvs_only = [&](int) {
      for (int l = 0; l < s.layers; ++l) {
        fn(qkv[l].weight(), xn.as<Bf16>(), qkv_out.data(), false);
        fn(o[l].weight(), attn.as<Bf16>(), delta.data(), false);
        fn(gu[l].weight(), xn.as<Bf16>(), gu_out.data(), false);
        fn(down[l].weight(), act.as<Bf16>(), delta.data(), false);
      }
      fn(lm_head.weight(), xn.as<Bf16>(), logits.data(), true);
    };
    double full = graph_replay_ms(st, [&] { step(0); });
    double gemv = graph_replay_ms(st, [&] { gemvs_only(0); });
    double floor_ms = weight_bytes / copy_bw * 1e3;
    std::printf(
        "  decode step 8B 4-bit g64 %-14s graph %.3f ms = %.1f tok/s (floor %.3f ms = %.0f tok/s, "
        "%.0f%% of floor); GEMVs alone %.3f ms (%.0f%% of copy on %.2f GB), other kernels %.3f "
        "ms\n",
        name.c_str(), full, 1e3 / full, floor_ms, 1e3 / floor_ms, 100 * floor_ms / full, gemv,
        100 * floor_ms / gemv, weight_bytes / 1e9, full - gemv);
    std::fflush(stdout);
  }

  // The lean stack: src's fused forms take the norms, the residual adds, the SiLU gate and
  // (tensor-core kernel) RoPE + the KV write: 5 kernels a layer as in the model's fused
  // quantized decode (the register kernel: 6, rope_kv_write apart), with and without PDL.
  // Variant 4 (tensor core, PDL): every GEMV on its weight in the tiled layout the model
  // relays it into at load (affine_tile: RoPE pairs for qkv, gated pairs for gate_up).
  std::vector<DeviceBuffer> tiled_bufs;
  std::vector<AffineQuantWeight> tiled_qkv, tiled_o, tiled_gu, tiled_down;
  AffineQuantWeight tiled_lm_head;
  auto tile = [&](const QMat& q, AffineLayout layout, int head_dim) {
    const AffineQuantWeight w = q.weight();
    tiled_bufs.push_back(lab.raw(affine_tiled_bytes(w, layout)));
    CK(affine_tile(w, layout, head_dim, tiled_bufs.back().data(), st));
    return affine_tiled_view(w, layout, head_dim, tiled_bufs.back().data());
  };
  for (int l = 0; l < s.layers; ++l) {
    tiled_qkv.push_back(tile(qkv[l], AffineLayout::kTiledRope, s.hd));
    tiled_o.push_back(tile(o[l], AffineLayout::kTiledPlain, 0));
    tiled_gu.push_back(tile(gu[l], AffineLayout::kTiledGated, 0));
    tiled_down.push_back(tile(down[l], AffineLayout::kTiledPlain, 0));
  }
  tiled_lm_head = tile(lm_head, AffineLayout::kTiledPlain, 0);
  // AffineGemvArgs::block_warps of the fused qkv and gate_up GEMVs (variant 4's A/B).
  int fused_warps = 0;
  for (int variant = 0; variant < 5; ++variant) {
    const int pdl = variant >= 4 ? 1 : variant & 1;
    const AffineGemvKernel kernel =
        variant < 2 ? AffineGemvKernel::kRegister : AffineGemvKernel::kTensorCore;
    const bool use_pdl = pdl == 1 && lab.props_.major >= 9;
    const bool tiled = variant == 4;
    auto W = [&](const QMat& q, const AffineQuantWeight& t) { return tiled ? t : q.weight(); };
    // With `rope`, the qkv GEMV takes rope_kv_write's work in its epilogue where supported
    // (as the model's fused decode does); otherwise it stores and rope_kv_write runs.
    auto gemv = [&](const AffineQuantWeight& w, const DeviceBuffer& x, void* y, int64_t ldy,
                    bool f32, GemvEpilogue e, const DeviceBuffer* norm,
                    const RopeKvWriteArgs* rope = nullptr) {
      AffineGemvArgs a;
      a.w = w;
      a.x = x.as<Bf16>();
      a.ldx = w.k;
      a.y = y;
      a.ldy = ldy;
      a.y_f32 = f32;
      a.epilogue = e;
      a.norm_weight = norm != nullptr ? norm->as<Bf16>() : nullptr;
      a.m = 1;
      a.sm_count = lab.sms_;
      a.pdl = use_pdl;
      a.kernel = kernel;
      a.block_warps = fused_warps;  // only the fused qkv and gated forms take it
      auto launch = [&](const AffineGemvArgs& args) { CK(affine_gemv(args, st)); };
      if (rope != nullptr) {
        AffineGemvArgs fused = a;
        fused.epilogue = GemvEpilogue::kRopeKvWrite;
        fused.rope = *rope;
        if (affine_gemv_supported(fused)) {
          launch(fused);
          return;
        }
      }
      launch(a);
      if (rope != nullptr) CK(rope_kv_write(*rope, st));
    };
    // Knock-outs (variant 4 only): a set bit leaves that kernel out of every layer, so the
    // step's time less the knocked-out step's is what the kernel costs in the chain.
    enum : unsigned {
      kNoQkv = 1,
      kNoAttn = 2,
      kNoO = 4,
      kNoGateUp = 8,
      kNoDown = 16,
      kNoHead = 32
    };
    unsigned skip = 0;
    int attn_warps = 0;  // PagedAttentionArgs::block_warps
    auto step = [&]() {
      for (int l = 0; l < s.layers; ++l) {
        RopeKvWriteArgs r;
        r.qkv = qkv_out.as<Bf16>();
        r.ld_qkv = s.qkv();
        r.positions = dpos.as<int32_t>();
        r.slots = dslot.as<int64_t>();
        r.inv_freq = dfreq.as<float>();
        r.q_out = q.as<Bf16>();
        r.ld_q_out = s.hidden;
        r.k_cache = kc[l].as<Bf16>();
        r.v_cache = vc[l].as<Bf16>();
        r.tokens = 1;
        r.q_heads = s.q_heads;
        r.kv_heads = s.kv_heads;
        r.head_dim = s.hd;
        r.rotary_dim = s.hd;
        if ((skip & kNoQkv) == 0) {
          gemv(W(qkv[l], tiled_qkv[l]), resid, qkv_out.data(), s.qkv(), false, GemvEpilogue::kStore,
               &norm1[l], &r);
        }
        PagedAttentionArgs a;
        a.q = q.as<Bf16>();
        a.ld_q = s.hidden;
        a.k_cache = kc[l].as<Bf16>();
        a.v_cache = vc[l].as<Bf16>();
        a.block_tables = dtable.as<int32_t>();
        a.ld_block_tables = int64_t(table.size());
        a.query_start = dqs.as<int32_t>();
        a.kv_lens = dkl.as<int32_t>();
        a.out = attn.as<Bf16>();
        a.ld_out = s.hidden;
        a.seqs = 1;
        a.tokens = 1;
        a.q_heads = s.q_heads;
        a.kv_heads = s.kv_heads;
        a.head_dim = s.hd;
        a.block_size = 16;
        a.scale = 0.0884f;
        a.num_splits = splits;
        a.pdl = use_pdl;  // as the model's decode step sets it
        a.block_warps = attn_warps;
        a.workspace = attn_ws.as<float>();
        if ((skip & kNoAttn) == 0) CK(paged_attention(a, st));
        if ((skip & kNoO) == 0) {
          gemv(W(o[l], tiled_o[l]), attn, resid.data(), s.hidden, false, GemvEpilogue::kResidualAdd,
               nullptr);
        }
        if ((skip & kNoGateUp) == 0) {
          gemv(W(gu[l], tiled_gu[l]), resid, act.data(), s.inter, false, GemvEpilogue::kGatedSilu,
               &norm2[l]);
        }
        if ((skip & kNoDown) == 0) {
          gemv(W(down[l], tiled_down[l]), act, resid.data(), s.hidden, false,
               GemvEpilogue::kResidualAdd, nullptr);
        }
      }
      if ((skip & kNoHead) == 0) {
        gemv(W(lm_head, tiled_lm_head), resid, logits.data(), s.vocab, true, GemvEpilogue::kStore,
             &final_norm);
      }
      SamplingArgs sa;
      sa.logits = logits.as<float>();
      sa.ld_logits = s.vocab;
      sa.rows = 1;
      sa.vocab = s.vocab;
      sa.params = dparams.as<SamplingRow>();
      sa.out_tokens = token.as<int32_t>();
      CK(sample_tokens(sa, st));
    };
    // The residual stream grows by adding each layer's outputs; restart it per replay
    // batch is unnecessary for timing (values stay finite over 23 replays of random data).
    auto step_ms = [&] { return graph_replay_ms(st, step); };
    const double ms = step_ms();
    if (tiled) {
      const std::pair<unsigned, const char*> knockouts[] = {
          {kNoQkv, "qkv"},        {kNoAttn, "attention"}, {kNoO, "o"},
          {kNoGateUp, "gate_up"}, {kNoDown, "down"},      {kNoHead, "lm_head"}};
      for (const auto& [bit, what] : knockouts) {
        skip = bit;
        const double without = step_ms();
        std::printf("  knock-out %-18s step %.3f ms: it costs %.3f ms (%.2f us a layer)\n", what,
                    without, ms - without, 1e3 * (ms - without) / s.layers);
      }
      skip = 0;
      for (int w : {4, 8}) {
        attn_warps = w;
        std::printf("  attention %d warps a block: step %.3f ms\n", w, step_ms());
      }
      attn_warps = 0;
      for (int round = 0; round < 2; ++round) {
        for (int w : {8, 16}) {
          fused_warps = w;
          std::printf("  qkv and gate_up at %d warps a block: step %.3f ms\n", w, step_ms());
        }
      }
      fused_warps = 0;
    }
    const double floor_ms = weight_bytes / copy_bw * 1e3;
    std::printf(
        "  decode step 8B 4-bit g64 lean (src %s, fused norm/residual/gate%s%s): graph %.3f ms = "
        "%.1f tok/s (%.0f%% of floor)\n",
        kernel == AffineGemvKernel::kRegister ? "register" : "tensor-core", use_pdl ? ", PDL" : "",
        tiled ? ", tiled weights" : "", ms, 1e3 / ms, 100 * floor_ms / ms);
    std::fflush(stdout);
  }
}

// ---- Bulk-copy streaming (S15): can cp.async.bulk into shared memory feed the GEMV's reads
// at the copy rate? Tiles of 16 rows x row_bytes stream through a ring of kStages stages per
// block (a stage: the 16 rows' next kSlab bytes, one bulk copy per row into rows kSlab + 32
// bytes apart, or with kWholeTile one copy of the whole contiguous tile), completion on an
// mbarrier per stage; the 8 warps read each stage as the affine kernel's fragments would
// (8-byte loads of rows g and g + 8, 4 steps of a 128-byte chunk).
[[maybe_unused]] __device__ __forceinline__ uint32_t lab_smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int kSlab, int kStages, bool kWholeTile>
__global__ void __launch_bounds__(256, 2)
    bulk_stream_kernel(const char* w, int rows, int row_bytes, unsigned* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) char ring_smem[];
  constexpr int kPitch = kWholeTile ? kSlab : kSlab + 32;
  constexpr int kStageBytes = 16 * kPitch;
  __shared__ __align__(8) uint64_t full[kStages];
  const int tiles = rows / 16;
  const int slabs = row_bytes / kSlab;
  const int my_tiles = tiles > int(blockIdx.x) ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int items = my_tiles * slabs;
  auto issue = [&](int i) {  // thread 0: item i = (tile, slab) into stage i % kStages
    const int tile = blockIdx.x + (i / slabs) * gridDim.x;
    const int slab = i % slabs;
    uint64_t* bar = &full[i % kStages];
    char* dst = ring_smem + (i % kStages) * kStageBytes;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(lab_smem(bar)),
                 "r"(16 * kSlab)
                 : "memory");
    const char* src = w + size_t(tile) * 16 * row_bytes + size_t(slab) * kSlab;
    if constexpr (kWholeTile) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];" ::"r"(lab_smem(dst)),
          "l"(src), "r"(16 * kSlab), "r"(lab_smem(bar))
          : "memory");
    } else {
      for (int r = 0; r < 16; ++r) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(lab_smem(dst + r * kPitch)),
            "l"(src + size_t(r) * row_bytes), "r"(kSlab), "r"(lab_smem(bar))
            : "memory");
      }
    }
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(lab_smem(&full[s])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int i = 0; i < kStages && i < items; ++i) issue(i);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  unsigned acc = 0;
  for (int i = 0; i < items; ++i) {
    const uint32_t bar = lab_smem(&full[i % kStages]);
    const uint32_t parity = (i / kStages) & 1;
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, "
          "0, p; }"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    }
    const char* st = ring_smem + (i % kStages) * kStageBytes;
    for (int c = warp; c < kSlab / 128; c += 8) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint2 a = *reinterpret_cast<const uint2*>(st + g * kPitch + c * 128 + 32 * j + 8 * t);
        const uint2 b =
            *reinterpret_cast<const uint2*>(st + (g + 8) * kPitch + c * 128 + 32 * j + 8 * t);
        acc ^= a.x + b.y;
        acc += a.y ^ b.x;
      }
    }
    __syncthreads();  // every warp is done with the stage
    if (threadIdx.x == 0 && i + kStages < items) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(i + kStages);
    }
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
#else
  (void)w, (void)rows, (void)row_bytes, (void)out;
#endif
}

void bulk_stream_lab(Lab& lab, double copy_bw) {
  std::printf("== bulk-copy streaming into shared memory (no math; 2 blocks/SM)\n");
  const size_t pool_bytes = size_t{512} << 20;
  DeviceBuffer pool = lab.raw(pool_bytes);
  CK(cudaMemsetAsync(pool.data(), 0x5A, pool_bytes, lab.st_));
  DeviceBuffer out = lab.raw(4096 * 4);
  auto run = [&](const char* name, auto kernel, int slab, int stages, bool whole, int rows,
                 int row_bytes) {
    const int pitch = whole ? slab : slab + 32;
    const size_t smem = size_t(stages) * 16 * pitch;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, smem));
    const size_t bytes = size_t(rows) * row_bytes;
    const int copies = int(pool_bytes / bytes);
    const int grid = std::min(rows / 16, lab.sms_ * std::max(per_sm, 1));
    const int chain = std::max(16, copies);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(lab.st_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < chain; ++i) {
      kernel<<<grid, 256, smem, lab.st_>>>(pool.as<char>() + (i % copies) * bytes, rows, row_bytes,
                                           out.as<unsigned>());
    }
    CK(cudaStreamEndCapture(lab.st_, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const double ms = median_ms(
                          lab.st_, [&](int) { CK(cudaGraphLaunch(exec, lab.st_)); }, 10, 2) /
                      chain;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    const double bw = bytes / (ms * 1e-3);
    std::printf(
        "  %-26s rows=%6d row_bytes=%5d (%5.1f MB): %7.2f us  %.3f TB/s  %3.0f%% of copy"
        "  (%d blocks/SM, %zu KB smem)\n",
        name, rows, row_bytes, bytes / 1e6, ms * 1e3, bw / 1e12, 100 * bw / copy_bw, per_sm,
        smem >> 10);
    std::fflush(stdout);
  };
  const std::pair<int, int> shapes[] = {{6144, 2048}, {4096, 2048}, {28672, 2048}, {4096, 7168}};
  for (auto [rows, row_bytes] : shapes) {
    run("rows 1 KB x 4 stages", bulk_stream_kernel<1024, 4, false>, 1024, 4, false, rows,
        row_bytes);
    run("rows 1 KB x 6 stages", bulk_stream_kernel<1024, 6, false>, 1024, 6, false, rows,
        row_bytes);
    run("rows 512 B x 8 stages", bulk_stream_kernel<512, 8, false>, 512, 8, false, rows, row_bytes);
    if (row_bytes % 2048 == 0) {
      run("rows 2 KB x 3 stages", bulk_stream_kernel<2048, 3, false>, 2048, 3, false, rows,
          row_bytes);
    }
    if (row_bytes == 2048) {
      run("whole 32 KB tile x 3", bulk_stream_kernel<2048, 3, true>, 2048, 3, true, rows,
          row_bytes);
    }
  }
}

int run() {
  Lab lab;
  std::printf("device: %s, %d SMs\n", lab.props_.name, lab.sms_);
  double copy_bw = measure_copy_bandwidth(lab.st_);
  const int sms = lab.sms_;
  cudaStream_t st = lab.st_;
  auto base = [&](const AffineQuantWeight& w, const Bf16* x, void* y, bool f32) {
    if (f32) {
      CK(v0::dispatch_gemv(w, x, w.k, 1, static_cast<float*>(y), w.n, sms, st));
    } else {
      CK(v0::dispatch_gemv(w, x, w.k, 1, static_cast<Bf16*>(y), w.n, sms, st));
    }
  };
  auto src_kernel = [&](AffineGemvKernel kernel) {
    return [&, kernel](const AffineQuantWeight& w, const Bf16* x, void* y, bool f32) {
      AffineGemvArgs a;
      a.w = w;
      a.x = x;
      a.ldx = w.k;
      a.y = y;
      a.ldy = w.n;
      a.y_f32 = f32;
      a.m = 1;
      a.sm_count = sms;
      a.kernel = kernel;
      if (!affine_gemv_supported(a)) a.kernel = AffineGemvKernel::kAuto;  // 8 bits: register
      CK(affine_gemv(a, st));
    };
  };
  auto src = src_kernel(AffineGemvKernel::kRegister);
  auto tensor = src_kernel(AffineGemvKernel::kTensorCore);
  auto h2 = [&](auto split, auto unroll, int blocks_per_sm, auto f32_math) {
    return [&, blocks_per_sm](const AffineQuantWeight& w, const Bf16* x, void* y, bool f32) {
      constexpr int kS = decltype(split)::value;
      constexpr int kU = decltype(unroll)::value;
      constexpr bool kF = decltype(f32_math)::value;
      if (w.bits == 4) {
        if (f32) {
          launch_h2<4, kS, kU, kF>(w, x, w.k, static_cast<float*>(y), w.n, sms, blocks_per_sm, st);
        } else {
          launch_h2<4, kS, kU, kF>(w, x, w.k, static_cast<Bf16*>(y), w.n, sms, blocks_per_sm, st);
        }
      } else if (f32) {
        launch_h2<8, kS, kU, kF>(w, x, w.k, static_cast<float*>(y), w.n, sms, blocks_per_sm, st);
      } else {
        launch_h2<8, kS, kU, kF>(w, x, w.k, static_cast<Bf16*>(y), w.n, sms, blocks_per_sm, st);
      }
    };
  };
  using I1 = std::integral_constant<int, 1>;
  using I4 = std::integral_constant<int, 4>;
  using H = std::false_type;  // packed-half math
  using F = std::true_type;   // f32 math
  auto async = [&](auto stages) {
    return [&](const AffineQuantWeight& w, const Bf16* x, void* y, bool f32) {
      constexpr int kS = decltype(stages)::value;
      if (w.bits == 4) {
        if (f32) {
          launch_async<4, kS>(w, x, w.k, static_cast<float*>(y), sms, st);
        } else {
          launch_async<4, kS>(w, x, w.k, static_cast<Bf16*>(y), sms, st);
        }
      } else if (f32) {
        launch_async<8, kS>(w, x, w.k, static_cast<float*>(y), sms, st);
      } else {
        launch_async<8, kS>(w, x, w.k, static_cast<Bf16*>(y), sms, st);
      }
    };
  };
  using I6 = std::integral_constant<int, 6>;
  // The 8B decode shapes: qkv, o, gate_up, down, lm_head.
  const std::vector<std::pair<int, int>> shapes = {
      {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  if (std::getenv("LAB_BULK") != nullptr) {  // the bulk-copy streaming microbenchmark only
    bulk_stream_lab(lab, copy_bw);
    return 0;
  }
  if (std::getenv("LAB_TILED") != nullptr) {  // the weight layout A/B only
    std::printf("== tiled weight layout (kTiledPlain) vs row-major, m=1, 4-bit g64\n");
    for (auto [n, k] : shapes) lab.tiled_shape(n, k, copy_bw);
    return 0;
  }
  if (std::getenv("LAB_STEP") != nullptr) {  // the decode step (lean, knock-outs) only
    decode_step(lab, copy_bw, {{"tensor default", tensor}});
    return 0;
  }
  if (std::getenv("LAB_NCU") != nullptr) {
    for (auto [n, k] : shapes)
      lab.profile_shape(n, k, 4, {{"src register", src}, {"tensor default", tensor}});
    return 0;
  }
  std::printf("== src: correctness sweep against the reference kernel\n");
  int failures = lab.sweep_src();
  failures += lab.check_fused(4, 14336, 4096, 1);
  failures += lab.check_fused(4, 2048, 4096, 3);
  failures += lab.check_fused(8, 1000, 4160, 2);
  failures += lab.check_fused(4, 4096, 14336, 6);
  std::printf("src sweep: %d failures\n", failures);
  std::vector<std::pair<std::string, Lab::GemvFn>> variants = {
      {"src register", src},
      {"tensor default", tensor},
  };
  if (std::getenv("LAB_ALL") != nullptr) {  // the earlier baselines
    variants.push_back({"v0 (src before)", base});
    variants.push_back({"h2 s1 u4 persist4", h2(I1{}, I4{}, 4, H{})});
  }
  for (auto [n, k] : shapes) {
    AffineGemvArgs a;
    a.w.n = n;
    a.w.k = k;
    a.w.packed = reinterpret_cast<const uint32_t*>(std::uintptr_t{256});
    a.w.scales = a.w.packed;
    a.w.biases = a.w.packed;
    a.m = 1;
    std::printf("  blocks/SM n=%d k=%d: tensor-core kernel %d\n", n, k,
                detail::affine_gemv_mma_blocks_per_sm(a));
  }
  for (int bits : {4}) {
    std::printf("== GEMV m=1, %d-bit g64 (bytes = packed + bf16 scales + biases)\n", bits);
    for (auto [n, k] : shapes) lab.gemv_shape(n, k, bits, copy_bw, variants);
  }
  std::printf("== dequantize to bf16 (prefill; bytes = quantized read + bf16 written)\n");
  lab.dequant_shape(28672, 4096, 4, copy_bw);
  lab.dequant_shape(4096, 14336, 8, copy_bw);
  std::printf("== decode step\n");
  decode_step(lab, copy_bw,
              {
                  {"src register", src},
                  {"tensor default", tensor},
              });
  (void)async(I6{});
  return 0;
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  try {
    return hearth::cuda::dev::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lab failed: %s\n", e.what());
    return 1;
  }
}
