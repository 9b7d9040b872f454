// Affine-quantized GEMV for decode: x is staged once per CTA in shared memory as half pairs
// scaled per 16-byte chunk of weights (plus the chunk's Σx), each 16-byte word of packed
// weights is unpacked two values per instruction by the magic-number trick into exact
// halves and multiplied in packed HFMA2, and the group's scale and bias enter in f32 as
// s·Σq·x + b·Σx. The decode step's fusions ride along (RMSNorm while staging x, residual-add
// and gated epilogues, programmatic dependent launch with the first weight loads issued
// before the wait). Prefill dequantizes to bf16 with one 16-byte chunk per thread.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/affine_gemv_epilogue.cuh"
#include "kernels/cuda/affine_gemv_mma.cuh"
#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/pdl.cuh"

namespace hearth::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kUnroll = 4;                         // 16-byte weight loads in flight per lane
constexpr size_t kMaxGemvSmem = size_t{96} << 10;  // x rows per launch are capped to fit

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// A chunk is one 16-byte word of packed weights: 32 values at 4 bits, 16 at 8 bits. Its x
// values live in kSlots 16-byte slots of half pairs, in the order the unpacking makes them.
template <int kBits>
struct Chunk {
  static constexpr int kValues = 128 / kBits;
  static constexpr int kSlots = kBits == 4 ? 4 : 2;
  static constexpr size_t kSmemPerRow = kSlots * 16 + sizeof(float2);  // per chunk and x row
};

__device__ __forceinline__ uint32_t half2_bits(__half2 v) {
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ __half2 bits_half2(uint32_t v) {
  return *reinterpret_cast<__half2*>(&v);
}

// x [rows, k] -> shared: slots [rows][kSlots][chunks] (uint4) then stats [rows][chunks]
// (float2: 2^e, Σx). With norm_weight, x is first replaced by rmsnorm_residual's bf16
// output bf16(x * inv_rms * (weight + offset)). Each chunk's x is divided by 2^e, its
// largest |x| rounded down to a power of two, so the halves lie in (-2, 2): no overflow,
// full 11-bit precision whatever the activations' range. One thread per (row, chunk).
template <int kBits>
__device__ __forceinline__ void stage_x(const __nv_bfloat16* x, int64_t ldx, int rows, int chunks,
                                        const __nv_bfloat16* norm_weight, float norm_offset,
                                        const float* inv_rms, uint4* slots, float2* stats) {
  using C = Chunk<kBits>;
  for (int u = threadIdx.x; u < rows * chunks; u += blockDim.x) {
    const int r = u / chunks;
    const int c = u - r * chunks;
    float v[C::kValues];
    detail::load_bf16<C::kValues>(x + r * ldx + c * C::kValues, v);
    if (norm_weight != nullptr) {
      const float inv = inv_rms[r];
#pragma unroll
      for (int i = 0; i < C::kValues; i += 8) {
        float g[8];
        detail::load_bf16<8>(norm_weight + c * C::kValues + i, g);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          v[i + j] = __bfloat162float(__float2bfloat16(v[i + j] * inv * (g[j] + norm_offset)));
        }
      }
    }
    float amax = 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < C::kValues; ++i) {
      amax = fmaxf(amax, fabsf(v[i]));
      sum += v[i];
    }
    // Zero or subnormal amax: the chunk adds nothing through the dot (scale 0); inf/NaN:
    // the scale carries it into the output.
    const uint32_t ebits = __float_as_uint(amax) & 0x7F800000u;
    float scale = 0.0f;
    float inv = 0.0f;
    if (ebits == 0x7F800000u) {
      scale = amax;
    } else if (ebits != 0) {
      scale = __uint_as_float(ebits);
      inv = __uint_as_float(0x7F000000u - ebits);
    }
    stats[r * chunks + c] = make_float2(scale, sum);
    uint4* dst = slots + r * C::kSlots * chunks + c;
#pragma unroll
    for (int j = 0; j < C::kSlots; ++j) {
      const float* p = v + 8 * j;
      uint4 o;
      if constexpr (kBits == 4) {  // word j = values 8j..8j+7: pairs (0,4) (1,5) (2,6) (3,7)
        o.x = half2_bits(__floats2half2_rn(p[0] * inv, p[4] * inv));
        o.y = half2_bits(__floats2half2_rn(p[1] * inv, p[5] * inv));
        o.z = half2_bits(__floats2half2_rn(p[2] * inv, p[6] * inv));
        o.w = half2_bits(__floats2half2_rn(p[3] * inv, p[7] * inv));
      } else {  // words 2j, 2j+1 = values 8j..8j+7: pairs (0,2) (1,3) per word
        o.x = half2_bits(__floats2half2_rn(p[0] * inv, p[2] * inv));
        o.y = half2_bits(__floats2half2_rn(p[1] * inv, p[3] * inv));
        o.z = half2_bits(__floats2half2_rn(p[4] * inv, p[6] * inv));
        o.w = half2_bits(__floats2half2_rn(p[5] * inv, p[7] * inv));
      }
      dst[j * chunks] = o;
    }
  }
}

// Σ q·x' of one chunk against one staged x row (`xs` = the chunk's slot 0; slots `stride`
// apart). (w & 0x000F000F) | 0x64006400 is the half pair 1024 + q exactly; nibbles one
// position up give 1024 + 16q, undone by one HFMA2. 8 bits: PRMT puts bytes under 0x64.
// Products and 8-term sums in half (|q·x'| < 30, or 510 at 8 bits).
template <int kBits>
__device__ __forceinline__ float chunk_dot(const uint4& p, const uint4* xs, int stride) {
  const __half2 k1024 = bits_half2(0x64006400u);
  __half2 a0 = bits_half2(0u);
  __half2 a1 = bits_half2(0u);
  const uint32_t words[4] = {p.x, p.y, p.z, p.w};
  if constexpr (kBits == 4) {
    const __half2 k16th = bits_half2(0x2C002C00u);   // 1/16
    const __half2 kneg64 = bits_half2(0xD400D400u);  // -64
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 xv = xs[j * stride];
      const uint32_t t = words[j];
      const uint32_t t8 = t >> 8;
      const __half2 q0 = __hsub2(bits_half2((t & 0x000F000Fu) | 0x64006400u), k1024);
      const __half2 q1 = __hfma2(bits_half2((t & 0x00F000F0u) | 0x64006400u), k16th, kneg64);
      const __half2 q2 = __hsub2(bits_half2((t8 & 0x000F000Fu) | 0x64006400u), k1024);
      const __half2 q3 = __hfma2(bits_half2((t8 & 0x00F000F0u) | 0x64006400u), k16th, kneg64);
      a0 = __hfma2(q0, bits_half2(xv.x), a0);
      a1 = __hfma2(q1, bits_half2(xv.y), a1);
      a0 = __hfma2(q2, bits_half2(xv.z), a0);
      a1 = __hfma2(q3, bits_half2(xv.w), a1);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint4 xv = xs[j * stride];
      const uint32_t t0 = words[2 * j];
      const uint32_t t1 = words[2 * j + 1];
      const __half2 q0 = __hsub2(bits_half2(__byte_perm(t0, 0x64646464u, 0x4240)), k1024);
      const __half2 q1 = __hsub2(bits_half2(__byte_perm(t0, 0x64646464u, 0x4341)), k1024);
      const __half2 q2 = __hsub2(bits_half2(__byte_perm(t1, 0x64646464u, 0x4240)), k1024);
      const __half2 q3 = __hsub2(bits_half2(__byte_perm(t1, 0x64646464u, 0x4341)), k1024);
      a0 = __hfma2(q0, bits_half2(xv.x), a0);
      a1 = __hfma2(q1, bits_half2(xv.y), a1);
      a0 = __hfma2(q2, bits_half2(xv.z), a0);
      a1 = __hfma2(q3, bits_half2(xv.w), a1);
    }
  }
  const float2 f = __half22float2(__hadd2(a0, a1));
  return f.x + f.y;
}

// One output per warp task; `split` warps share a task (each owns every split-th run of 32
// chunks) and add their sums through shared memory; gated tasks stream two weight rows (j,
// j + n). kPreload (with PDL): the first task's first weight loads go out before the wait on
// the previous kernel (weights never depend on it), at the cost of 3 blocks per SM instead
// of 4 (the loaded block stays live across the staging of x).
template <int kRows, int kPair, bool kPreload>
constexpr int blocks_per_sm() {
  return kRows > 2 ? 2 : kPreload || kPair * kRows > 2 ? 3 : 4;
}

template <int kBits, int kRows, typename ScaleT, typename OutT, int kPair, bool kPreload>
__global__ void __launch_bounds__(kThreads, blocks_per_sm<kRows, kPair, kPreload>())
    affine_gemv_kernel(const AffineGemvArgs a, int split) {
  using C = Chunk<kBits>;
  constexpr int kU = kUnroll / kPair;  // loads in flight per lane per weight row
  extern __shared__ uint4 smem[];
  __shared__ float red[2][kWarpsPerBlock][kPair * kRows];
  __shared__ float scratch[32];
  __shared__ float inv_rms[kRows];
  const AffineQuantWeight& w = a.w;
  const int chunks = w.k / C::kValues;
  const int groups = w.k / w.group_size;
  const int group_shift = __ffs(w.group_size / C::kValues) - 1;
  const int n = w.n / kPair;  // outputs
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int tasks_per_block = kWarpsPerBlock / split;
  const int sub = warp % split;
  const int stride = 32 * split;
  const int first = sub * 32 + lane;
  const uint4* packed = reinterpret_cast<const uint4*>(w.packed);
  const ScaleT* scales = static_cast<const ScaleT*>(w.scales);
  const ScaleT* biases = static_cast<const ScaleT*>(w.biases);

  uint4 p[kPair][kU];
  float s[kPair][kU];
  float b[kPair][kU];
  auto load_block = [&](int task, int c0) {
#pragma unroll
    for (int q = 0; q < kPair; ++q) {
      const int64_t row = task + q * n;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int c = c0 + u * stride;
        if (c < chunks) {
          p[q][u] = detail::load_stream16(packed + row * chunks + c);
          s[q][u] = to_float(scales[row * groups + (c >> group_shift)]);
          b[q][u] = to_float(biases[row * groups + (c >> group_shift)]);
        }
      }
    }
  };
  bool preloaded = kPreload && blockIdx.x * tasks_per_block + warp / split < n;
  if (preloaded) load_block(blockIdx.x * tasks_per_block + warp / split, first);

  detail::grid_dependency_wait();
  if (a.norm_weight != nullptr)
    detail::block_inverse_rms<kThreads>(a.x, a.ldx, kRows, w.k, a.norm_eps, inv_rms, scratch);
  uint4* slots = smem;
  float2* stats = reinterpret_cast<float2*>(smem + kRows * C::kSlots * chunks);
  stage_x<kBits>(a.x, a.ldx, kRows, chunks, a.norm_weight, a.norm_offset, inv_rms, slots, stats);
  __syncthreads();
  detail::launch_dependents();

  int parity = 0;
  for (int base = blockIdx.x * tasks_per_block; base < n; base += gridDim.x * tasks_per_block) {
    const int task = base + warp / split;  // the loop is uniform per block
    float acc[kPair][kRows];
#pragma unroll
    for (int q = 0; q < kPair; ++q) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[q][r] = 0.0f;
    }
    if (task < n) {
      for (int c0 = first; c0 < chunks; c0 += stride * kU) {
        if (!preloaded) load_block(task, c0);
        preloaded = false;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int c = c0 + u * stride;
          if (c < chunks) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              const uint4* xs = slots + r * C::kSlots * chunks + c;
              const float2 st = stats[r * chunks + c];
#pragma unroll
              for (int q = 0; q < kPair; ++q) {
                const float dot = chunk_dot<kBits>(p[q][u], xs, chunks);
                acc[q][r] = fmaf(s[q][u] * st.x, dot, fmaf(b[q][u], st.y, acc[q][r]));
              }
            }
          }
        }
      }
    }
    preloaded = false;  // unused when this warp's first stripe is past k
    detail::reduce_task_sums<kPair, kRows, kWarpsPerBlock>(acc, red, parity, warp, sub, lane,
                                                           split);
    if (task < n && sub == 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        detail::affine_store_output<OutT>(a, r, task, acc[0][r], acc[kPair - 1][r]);
    }
  }
}

// A thread takes whole packed words, kBatch of them loaded (with their scales and biases)
// before its first store: a store may alias a later load, so a load-store loop waited one
// round trip a word (the 4-bit 8B row's 16 in series: ~9 us under Nsight Compute).
template <int kBits, typename ScaleT>
__global__ void affine_embedding_kernel(AffineQuantWeight w, const int32_t* ids, float scale,
                                        __nv_bfloat16* out, int64_t ld_out) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  constexpr int kBatch = 4;
  int t = blockIdx.x;
  int id = ids[t];
  __nv_bfloat16* dst = out + t * ld_out;
  if (id < 0 || id >= w.n) {
    for (int i = threadIdx.x; i < w.k; i += blockDim.x) dst[i] = __float2bfloat16(0.0f);
    return;
  }
  const int groups = w.k / w.group_size;
  const int words = w.k / kPerWord;
  const uint32_t* row = w.packed + static_cast<int64_t>(id) * words;
  const ScaleT* s = static_cast<const ScaleT*>(w.scales) + static_cast<int64_t>(id) * groups;
  const ScaleT* b = static_cast<const ScaleT*>(w.biases) + static_cast<int64_t>(id) * groups;
  for (int base = 0; base < words; base += kBatch * blockDim.x) {
    uint32_t q[kBatch];
    ScaleT sv[kBatch];
    ScaleT bv[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int wi = base + u * blockDim.x + threadIdx.x;
      if (wi < words) {
        const int g = wi * kPerWord / w.group_size;
        q[u] = row[wi];
        sv[u] = s[g];
        bv[u] = b[g];
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int wi = base + u * blockDim.x + threadIdx.x;
      if (wi >= words) continue;
#pragma unroll
      for (int j = 0; j < kPerWord; ++j) {
        float v =
            to_float(sv[u]) * static_cast<float>((q[u] >> (kBits * j)) & kMask) + to_float(bv[u]);
        dst[wi * kPerWord + j] = __float2bfloat16(v * scale);
      }
    }
  }
}

// One word per thread, scalar stores: any ld_out / alignment.
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

// Eight output values (16 bytes of bf16) per thread: one packed word at 4 bits, two at 8;
// a warp's loads and its 16-byte streaming stores are both contiguous (out 16-byte aligned,
// ld_out % 8 == 0). The same arithmetic, so the same bits, as the scalar kernel.
template <int kBits, typename ScaleT>
__global__ void affine_dequantize_chunk_kernel(AffineQuantWeight w, __nv_bfloat16* out,
                                               int64_t ld_out) {
  constexpr int kWords = kBits / 4;  // packed words per 8 values
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  const int pieces = w.k / 8;  // per row
  const int groups = w.k / w.group_size;
  const int64_t total = static_cast<int64_t>(pieces) * w.n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / pieces;
    const int col = static_cast<int>(idx - n * pieces) * 8;
    uint32_t words[kWords];
    if constexpr (kWords == 1) {
      words[0] = __ldcs(w.packed + idx);
    } else {
      const uint2 v = __ldcs(reinterpret_cast<const uint2*>(w.packed) + idx);
      words[0] = v.x;
      words[1] = v.y;
    }
    const int g = col / w.group_size;
    const float s = to_float(static_cast<const ScaleT*>(w.scales)[n * groups + g]);
    const float b = to_float(static_cast<const ScaleT*>(w.biases)[n * groups + g]);
    uint32_t o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int v0 = 2 * j;
      const int v1 = v0 + 1;
      const float f0 =
          s * static_cast<float>((words[v0 / kPerWord] >> (kBits * (v0 % kPerWord))) & kMask) + b;
      const float f1 =
          s * static_cast<float>((words[v1 / kPerWord] >> (kBits * (v1 % kPerWord))) & kMask) + b;
      const __nv_bfloat162 h = __floats2bfloat162_rn(f0, f1);
      o[j] = *reinterpret_cast<const uint32_t*>(&h);
    }
    __stcs(reinterpret_cast<uint4*>(out + n * ld_out + col), make_uint4(o[0], o[1], o[2], o[3]));
  }
}

bool gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

// One warp per row (split 1): W1 measured 2 and 4 warps per row no faster on any 8B shape
// (dev/cuda/NOTES.md); the kernel keeps the option for later.
template <int kBits, int kRows, typename ScaleT, typename OutT, int kPair, bool kPreload>
cudaError_t launch_rows(const AffineGemvArgs& a, cudaStream_t stream) {
  using C = Chunk<kBits>;
  constexpr int kBlocksPerSm = blocks_per_sm<kRows, kPair, kPreload>();
  const size_t smem = static_cast<size_t>(kRows) * (a.w.k / C::kValues) * C::kSmemPerRow;
  const int n = a.w.n / kPair;
  const int split = 1;
  auto* kernel = affine_gemv_kernel<kBits, kRows, ScaleT, OutT, kPair, kPreload>;
  if (smem > 48 * 1024) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const int tasks_per_block = kWarpsPerBlock / split;
  const int grid =
      std::min(detail::ceil_div(n, tasks_per_block), std::max(1, a.sm_count) * kBlocksPerSm);
  return detail::launch_kernel(kernel, dim3(grid), dim3(kThreads), smem, stream, a.pdl, a, split);
}

// Preloading pays only under PDL, and only decode's 1-2 rows get the variant.
template <int kBits, int kRows, typename ScaleT, typename OutT, int kPair>
cudaError_t launch_rows(const AffineGemvArgs& a, cudaStream_t stream) {
  if constexpr (kRows <= 2) {
    if (a.pdl) return launch_rows<kBits, kRows, ScaleT, OutT, kPair, true>(a, stream);
  }
  return launch_rows<kBits, kRows, ScaleT, OutT, kPair, false>(a, stream);
}

template <int kBits, typename ScaleT, typename OutT>
cudaError_t dispatch_rows(const AffineGemvArgs& a, int rows, cudaStream_t stream) {
  if constexpr (sizeof(OutT) == 2) {
    if (gated(a.epilogue)) {
      switch (rows) {
        case 1:
          return launch_rows<kBits, 1, ScaleT, OutT, 2>(a, stream);
        case 2:
          return launch_rows<kBits, 2, ScaleT, OutT, 2>(a, stream);
        case 3:
          return launch_rows<kBits, 3, ScaleT, OutT, 2>(a, stream);
        case 4:
          return launch_rows<kBits, 4, ScaleT, OutT, 2>(a, stream);
        default:
          return cudaErrorInvalidValue;
      }
    }
  }
  switch (rows) {
#define HEARTH_GEMV_CASE(R) \
  case R:                   \
    return launch_rows<kBits, R, ScaleT, OutT, 1>(a, stream);
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
}

// x rows in batches small enough for the staged x to fit in shared memory (one launch for
// every decode shape; more only for many rows of a very wide k).
template <int kBits, typename ScaleT, typename OutT>
cudaError_t launch_gemv(const AffineGemvArgs& args, cudaStream_t stream) {
  const size_t per_row =
      static_cast<size_t>(args.w.k / Chunk<kBits>::kValues) * Chunk<kBits>::kSmemPerRow;
  int device = 0;
  int optin = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (err != cudaSuccess) return err;
  const size_t limit = std::min(kMaxGemvSmem, static_cast<size_t>(std::max(optin, 2048)) - 1024);
  const int batch = static_cast<int>(std::min<size_t>(args.m, limit / per_row));
  if (batch < 1) return cudaErrorInvalidValue;  // k too wide for one staged x row
  for (int r0 = 0; r0 < args.m; r0 += batch) {
    AffineGemvArgs a = args;
    a.x = args.x + r0 * args.ldx;
    a.y = static_cast<OutT*>(args.y) + r0 * args.ldy;
    err = dispatch_rows<kBits, ScaleT, OutT>(a, std::min(batch, args.m - r0), stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// A tiled weight keeps its scales and biases inside its image.
bool valid_weight(const AffineQuantWeight& w) {
  const bool tiled = w.layout != AffineLayout::kRowMajor;
  return (w.bits == 4 || w.bits == 8) &&
         (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) && w.n > 0 && w.k > 0 &&
         w.k % w.group_size == 0 && w.packed != nullptr &&
         (tiled || (w.scales != nullptr && w.biases != nullptr));
}

}  // namespace

bool affine_gemv_supported(const AffineGemvArgs& a) {
  const bool pair = gated(a.epilogue);
  if (!valid_weight(a.w) || a.m < 1 || a.m > kAffineGemvMaxRows || a.x == nullptr ||
      a.ldx < a.w.k || a.ldx % 8 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w.packed) % 16 != 0) {
    return false;
  }
  // A tiled weight: the tensor-core kernel only, with an epilogue its layout serves.
  if (a.w.layout != AffineLayout::kRowMajor &&
      (a.kernel == AffineGemvKernel::kRegister || !detail::affine_gemv_mma_supported(a))) {
    return false;
  }
  if (a.epilogue == GemvEpilogue::kRopeKvWrite) {
    const RopeKvWriteArgs& r = a.rope;
    return a.kernel != AffineGemvKernel::kRegister && !a.y_f32 && r.q_heads > 0 && r.kv_heads > 0 &&
           r.head_dim > 0 && r.head_dim % 2 == 0 && r.rotary_dim == r.head_dim &&
           r.q_norm == nullptr && r.k_norm == nullptr &&
           static_cast<int64_t>(r.q_heads + 2 * r.kv_heads) * r.head_dim == a.w.n &&
           r.ld_q_out >= static_cast<int64_t>(r.q_heads) * r.head_dim && r.positions != nullptr &&
           r.slots != nullptr && r.inv_freq != nullptr && r.q_out != nullptr &&
           r.k_cache != nullptr && r.v_cache != nullptr && detail::affine_gemv_mma_supported(a);
  }
  if (a.y == nullptr) return false;
  if (pair && (a.w.n % 2 != 0 || a.m > 4)) return false;
  if (a.ldy < (pair ? a.w.n / 2 : a.w.n)) return false;
  if (a.y_f32 && (pair || a.epilogue == GemvEpilogue::kResidualAdd)) return false;
  if (a.kernel == AffineGemvKernel::kTensorCore) return detail::affine_gemv_mma_supported(a);
  return true;
}

cudaError_t affine_gemv(const AffineGemvArgs& a, cudaStream_t stream) {
  if (!affine_gemv_supported(a)) return cudaErrorInvalidValue;
  if (a.kernel != AffineGemvKernel::kRegister && detail::affine_gemv_mma_supported(a)) {
    return detail::affine_gemv_mma(a, stream);
  }
  if (a.y_f32) {
    if (a.w.bits == 4) {
      return a.w.f16_scales ? launch_gemv<4, __half, float>(a, stream)
                            : launch_gemv<4, __nv_bfloat16, float>(a, stream);
    }
    return a.w.f16_scales ? launch_gemv<8, __half, float>(a, stream)
                          : launch_gemv<8, __nv_bfloat16, float>(a, stream);
  }
  if (a.w.bits == 4) {
    return a.w.f16_scales ? launch_gemv<4, __half, __nv_bfloat16>(a, stream)
                          : launch_gemv<4, __nv_bfloat16, __nv_bfloat16>(a, stream);
  }
  return a.w.f16_scales ? launch_gemv<8, __half, __nv_bfloat16>(a, stream)
                        : launch_gemv<8, __nv_bfloat16, __nv_bfloat16>(a, stream);
}

cudaError_t affine_gemv(const AffineQuantWeight& w, const __nv_bfloat16* x, int64_t ldx, int m,
                        void* y, int64_t ldy, bool y_f32, int sm_count, cudaStream_t stream) {
  AffineGemvArgs a;
  a.w = w;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.y_f32 = y_f32;
  a.m = m;
  a.sm_count = sm_count;
  return affine_gemv(a, stream);
}

cudaError_t affine_embedding_gather(const AffineQuantWeight& w, const int32_t* ids, int tokens,
                                    float scale, __nv_bfloat16* out, int64_t ld_out,
                                    cudaStream_t stream) {
  if (!valid_weight(w) || w.layout != AffineLayout::kRowMajor || tokens < 0 || ld_out < w.k) {
    return cudaErrorInvalidValue;
  }
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
  if (w.layout != AffineLayout::kRowMajor)
    return detail::affine_dequantize_tiled(w, out, ld_out, stream);
  const bool chunked = ld_out % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w.packed) % 16 == 0;
  if (chunked) {
    const int64_t pieces = static_cast<int64_t>(w.n) * (w.k / 8);
    const int blocks = static_cast<int>(std::min<int64_t>((pieces + 255) / 256, 65536));
    if (w.bits == 4) {
      if (w.f16_scales) {
        affine_dequantize_chunk_kernel<4, __half><<<blocks, 256, 0, stream>>>(w, out, ld_out);
      } else {
        affine_dequantize_chunk_kernel<4, __nv_bfloat16>
            <<<blocks, 256, 0, stream>>>(w, out, ld_out);
      }
    } else if (w.f16_scales) {
      affine_dequantize_chunk_kernel<8, __half><<<blocks, 256, 0, stream>>>(w, out, ld_out);
    } else {
      affine_dequantize_chunk_kernel<8, __nv_bfloat16><<<blocks, 256, 0, stream>>>(w, out, ld_out);
    }
    return cudaGetLastError();
  }
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
