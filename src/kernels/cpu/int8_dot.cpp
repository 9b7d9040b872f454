// Int8 dot-product kernels for MLX 4/8-bit weights (see int8_dot.h): activation
// quantization, a decode mat-vec over weight rows and a register-tiled prefill GEMM, both on
// AVX512-VNNI `vpdpbusd` (u8 weight codes x s8 activations -> s32 per group).
// The AVX-512 intrinsics header first (kernels/cpu/intrinsics.h says why).
#include "kernels/cpu/intrinsics.h"

#include "kernels/cpu/int8_dot.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/vec_math.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
#define HEARTH_CPU_VNNI 1
#endif

namespace hearth::kernels::cpu {

bool int8_dot_available() {
#ifdef HEARTH_CPU_VNNI
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

bool int8_dot_supported(const WeightMatrix& w) {
  return w.quantized() && (w.bits == 4 || w.bits == 8) &&
         (w.group_size == 32 || (w.group_size > 0 && w.group_size % 64 == 0)) &&
         w.cols % w.group_size == 0 && int8_dot_available();
}

bool rows16_wanted(const WeightMatrix& w) { return int8_dot_supported(w); }

Rows16Bytes rows16_bytes(const WeightMatrix& w) {
  const auto blocks = static_cast<std::size_t>((w.rows + 15) / 16);
  const std::size_t groups = static_cast<std::size_t>(w.cols / w.group_size);
  return {blocks * 16 * static_cast<std::size_t>(w.cols * w.bits / 8),
          blocks * groups * 16 * dtype_size(w.scale_dtype)};
}

void interleave_rows16(const WeightMatrix& w, uint8_t* codes, void* scales, void* biases) {
  interleave_rows16_blocks(w, 0, (w.rows + 15) / 16, codes, scales, biases);
}

void interleave_rows16_blocks(const WeightMatrix& w, int64_t block0, int64_t block1, uint8_t* codes,
                              void* scales, void* biases) {
  const int64_t groups = w.cols / w.group_size;
  const int64_t row_bytes = w.cols * w.bits / 8;
  const int64_t quads = row_bytes / 4;  // 32-bit words of a row
  const std::size_t es = dtype_size(w.scale_dtype);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t blk = block0; blk < block1; ++blk) {
    uint8_t* dst = codes + blk * 16 * row_bytes;
    int64_t k0 = 0;
#ifdef HEARTH_CPU_VNNI
    // 16 four-column words of 16 rows at a time, transposed in registers.
    for (; k0 + 16 <= quads; k0 += 16) {
      __m512 t[16];
      for (int l = 0; l < 16; ++l) {
        const int64_t r = blk * 16 + l;
        t[l] = r < w.rows ? _mm512_loadu_ps(src + r * row_bytes + k0 * 4) : _mm512_setzero_ps();
      }
      transpose16(t);
      for (int q = 0; q < 16; ++q) _mm512_storeu_ps(dst + (k0 + q) * 64, t[q]);
    }
#endif
    for (int l = 0; l < 16; ++l) {
      const int64_t r = blk * 16 + l;
      for (int64_t k = k0; k < quads; ++k) {
        uint8_t* word = dst + (k * 16 + l) * 4;
        if (r < w.rows) {
          std::memcpy(word, src + r * row_bytes + k * 4, 4);
        } else {
          std::memset(word, 0, 4);
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const std::size_t at = static_cast<std::size_t>((blk * groups + g) * 16 + l) * es;
        auto* s_out = static_cast<uint8_t*>(scales) + at;
        auto* b_out = static_cast<uint8_t*>(biases) + at;
        if (r < w.rows) {
          const std::size_t from = static_cast<std::size_t>(r * groups + g) * es;
          std::memcpy(s_out, static_cast<const uint8_t*>(w.scales) + from, es);
          std::memcpy(b_out, static_cast<const uint8_t*>(w.biases) + from, es);
        } else {
          std::memset(s_out, 0, es);
          std::memset(b_out, 0, es);
        }
      }
    }
  }
}

#ifdef HEARTH_CPU_VNNI
namespace {

// Batches of at most this many rows take the mat-vec (dot-product) kernels.
constexpr int64_t kMatVecRows = 4;
// Decode prefetches each weight row this many bytes ahead of its loads (into L1): on weights
// streamed from DRAM one core went 9.1-9.8 -> 12.5-13.7 GB/s (8-bit, 128256 x 2048), no
// change when they sit in L3.
constexpr int64_t kPrefetchBytes = 8192;
// Batch-1 8-bit decode prefetches twice: kNearBytes of reading ahead into L1 and kFarBytes into
// L2 (T2). On the GPU machine's CPU (lab int8_decode_cpu, W1, 1B token on 2 pinned threads) the
// far prefetch took a variant from 55.4 to 44.5 ms (pure read of the bytes: 40.1 ms); on one
// thread 88.9 -> 91.2 ms.
constexpr int64_t kNearBytes = 4096;
constexpr int64_t kFarBytes = 16384;
// Below this many multiply-adds a decode call runs on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 16;
// GEMM blocking: weight rows per micro-tile, weight rows per block (a multiple of kTileRows and
// of the rows16 layout's 16; a block's codes, <= 48 x 8 KiB, stay in L2 while every activation
// tile passes), activation rows per tile (a [cols, 32] tile is <= 256 KiB for 8192 columns).
constexpr int kTileRows = 6;
constexpr int64_t kBlockRows = 48;
static_assert(kBlockRows % kTileRows == 0 && kBlockRows % 16 == 0);
constexpr int64_t kActTile = 32;

// One side tensor (scales or biases) of a quantized matrix: lanes [at, at + 16) under mask k
// as f32.
inline __m512 load_side16(const void* base, DType dtype, int64_t at, __mmask16 k) {
  if (dtype == DType::kBF16) {
    const __m256i raw = _mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(base) + at);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  if (dtype == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(base) + at));
  }
  return _mm512_maskz_loadu_ps(k, static_cast<const float*>(base) + at);
}

inline __mmask16 lanes_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// 4-bit codes unpack a chunk of 2n columns (n bytes) as [n low nibbles | n high nibbles],
// i.e. columns [0, 2, .., 2n-2, 1, 3, .., 2n-1]. Quantized activations are stored in the same
// order so byte t of an unpacked chunk meets byte t of the activations. `chunk` is 128 (decode
// with groups of 64 or multiples of 128: one zmm of packed codes), 64 (decode with 32-column
// groups: one zmm of unpacked codes) or 32 (the GEMM with 32-column groups, so each group
// stays contiguous); a row ends in smaller chunks where its length is not a multiple.
void permute_even_odd(int8_t* q, int64_t cols, int chunk) {
  alignas(64) uint8_t idx64[64];
  alignas(32) uint8_t idx32[32];
  for (int t = 0; t < 32; ++t) {
    idx64[t] = static_cast<uint8_t>(2 * t);
    idx64[32 + t] = static_cast<uint8_t>(2 * t + 1);
  }
  for (int t = 0; t < 16; ++t) {
    idx32[t] = static_cast<uint8_t>(2 * t);
    idx32[16 + t] = static_cast<uint8_t>(2 * t + 1);
  }
  const __m512i p64 = _mm512_load_si512(idx64);
  const __m256i p32 = _mm256_load_si256(reinterpret_cast<const __m256i*>(idx32));
  int64_t c = 0;
  if (chunk == 8) {
    // Each 8 columns as [0, 2, 4, 6 | 1, 3, 5, 7] (the rows16 decode's four-column words).
    alignas(64) uint8_t idx8[64];
    for (int t = 0; t < 64; ++t) {
      const int o = t / 8, u = t % 8;
      idx8[t] = static_cast<uint8_t>(8 * o + (u < 4 ? 2 * u : 2 * (u - 4) + 1));
    }
    const __m512i p8 = _mm512_load_si512(idx8);
    for (; c + 64 <= cols; c += 64) {
      _mm512_storeu_si512(q + c, _mm512_permutexvar_epi8(p8, _mm512_loadu_si512(q + c)));
    }
    for (; c + 32 <= cols; c += 32) {
      auto* p = reinterpret_cast<__m256i*>(q + c);
      _mm256_storeu_si256(
          p, _mm256_permutexvar_epi8(_mm512_castsi512_si256(p8), _mm256_loadu_si256(p)));
    }
    return;
  }
  if (chunk == 128) {
    // Evens of 128 bytes are idx64[0..31] over both halves: byte 2t of (a, b) for t < 64.
    alignas(64) uint8_t even[64], odd[64];
    for (int t = 0; t < 64; ++t) {
      even[t] = static_cast<uint8_t>(2 * t);
      odd[t] = static_cast<uint8_t>(2 * t + 1);
    }
    const __m512i pe = _mm512_load_si512(even), po = _mm512_load_si512(odd);
    for (; c + 128 <= cols; c += 128) {
      const __m512i a = _mm512_loadu_si512(q + c), b = _mm512_loadu_si512(q + c + 64);
      _mm512_storeu_si512(q + c, _mm512_permutex2var_epi8(a, pe, b));
      _mm512_storeu_si512(q + c + 64, _mm512_permutex2var_epi8(a, po, b));
    }
  }
  if (chunk >= 64) {
    for (; c + 64 <= cols; c += 64) {
      _mm512_storeu_si512(q + c, _mm512_permutexvar_epi8(p64, _mm512_loadu_si512(q + c)));
    }
  }
  for (; c + 32 <= cols; c += 32) {
    auto* p = reinterpret_cast<__m256i*>(q + c);
    _mm256_storeu_si256(p, _mm256_permutexvar_epi8(p32, _mm256_loadu_si256(p)));
  }
}

// Quantizes one activation row per group of `group` columns: d = max|x| / 127, xq =
// round(x / d) in [-127, 127] (all zero for an all-zero group), sum = Σx in f32. Writes q
// [cols] (4-bit weights: permute_even_odd order), d[g * stride] and sum[g * stride].
void quantize_row(const float* x, int64_t cols, int group, int bits, int chunk, int8_t* q, float* d,
                  float* sum, int64_t stride) {
  const int64_t groups = cols / group;
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * group;
    __m512 amax = _mm512_setzero_ps(), acc = _mm512_setzero_ps();
    for (int c = 0; c < group; c += 16) {
      const __m512 v = _mm512_loadu_ps(xg + c);
      acc = _mm512_add_ps(acc, v);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
    }
    const float a = _mm512_reduce_max_ps(amax);
    const __m512 inv = _mm512_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
    d[g * stride] = a / 127.0f;
    sum[g * stride] = _mm512_reduce_add_ps(acc);
    for (int c = 0; c < group; c += 16) {
      const __m512i i32 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + c), inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * group + c), _mm512_cvtsepi32_epi8(i32));
    }
  }
  if (bits == 4) permute_even_odd(q, cols, chunk);
}

// The 64 codes of one weight row from column c (a multiple of 32) as bytes: 8-bit as stored,
// 4-bit unpacked to [low nibbles | high nibbles]; and the 32-column version.
template <int Bits>
inline __m512i load_codes64(const uint8_t* row, int64_t c) {
  if constexpr (Bits == 8) {
    return _mm512_loadu_si512(row + c);
  } else {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c / 2));
    const __m256i m = _mm256_set1_epi8(0x0f);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(b, m)),
                              _mm256_and_si256(_mm256_srli_epi16(b, 4), m), 1);
  }
}
template <int Bits>
inline __m256i load_codes32(const uint8_t* row, int64_t c) {
  if constexpr (Bits == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c));
  } else {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2));
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(b, m)),
                                   _mm_and_si128(_mm_srli_epi16(b, 4), m), 1);
  }
}

// acc + Σ of four u8 x s8 products per 32-bit lane (`vpdpbusd`), accumulating in place: GCC
// 12 copies the accumulator before and after the intrinsic in unrolled loops (two register
// moves per instruction measured in the GEMM's inner loop).
inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}

// acc + Σ of four u8 x s8 products per lane, the s8 side one 32-bit word at x broadcast to
// every lane (`vpdpbusd` with an embedded broadcast: the word is loaded by the instruction).
inline __m512i dpbusd_bcst(__m512i acc, __m512i u8, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(u8), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

// ---- decode: one weight row against M <= 4 activation rows ----

// R rows read side by side (row_bytes each, at byte pos of their rows) prefetch kPrefetchBytes
// of reading ahead: kPrefetchBytes / R further in their own rows, running on into the same
// rows of the next step once those end (a fixed distance would land on rows already being read
// when a row is longer than kPrefetchBytes / R: 8-bit 8192-column rows went 12.6-13.1 -> 14.7
// GB/s on one core); rows shorter than that: kPrefetchBytes on, whole steps ahead.
template <int R, int64_t Ahead = kPrefetchBytes>
inline int64_t prefetch_offset(int64_t pos, int64_t row_bytes) {
  constexpr int64_t kPerRow = Ahead / R;
  if (kPerRow >= row_bytes) return Ahead;
  return pos + kPerRow < row_bytes ? kPerRow : kPerRow + (R - 1) * row_bytes;
}

template <int R>
inline void prefetch_ahead(const uint8_t* row, int64_t pos, int64_t row_bytes) {
  _mm_prefetch(reinterpret_cast<const char*>(row + pos + prefetch_offset<R>(pos, row_bytes)),
               _MM_HINT_T0);
}

// For R weight rows from r: cs[(j * M + i) * groups + g] = s_jg · d_ig and bt[j * M + i] =
// Σ_g b_jg · sum_ig, with d / sums [M, groups].
void row_factors(const WeightMatrix& w, int64_t r, int R, int M, const float* d, const float* sums,
                 float* cs, float* bt) {
  const int64_t groups = w.cols / w.group_size;
  for (int j = 0; j < R; ++j) {
    __m512 bacc[kMatVecRows];
    for (int i = 0; i < M; ++i) bacc[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g += 16) {
      const __mmask16 k = lanes_mask(groups - g);
      const int64_t at = (r + j) * groups + g;
      const __m512 s = load_side16(w.scales, w.scale_dtype, at, k);
      const __m512 b = load_side16(w.biases, w.scale_dtype, at, k);
      for (int i = 0; i < M; ++i) {
        const __m512 dv = _mm512_maskz_loadu_ps(k, d + i * groups + g);
        _mm512_mask_storeu_ps(cs + (j * M + i) * groups + g, k, _mm512_mul_ps(s, dv));
        bacc[i] = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(k, sums + i * groups + g), bacc[i]);
      }
    }
    for (int i = 0; i < M; ++i) bt[j * M + i] = _mm512_reduce_add_ps(bacc[i]);
  }
}

// y[i * R + j] = Σ_g cs[(j * M + i) * groups + g] · Σ(q_jg · xq_ig) + bt[j * M + i] for R
// weight rows (row j's codes at q + j * row_bytes) and M quantized activation rows
// (xq + i * cols, 64-column permute order).
template <int Bits, int R, int M>
void dot_rows(const uint8_t* q, int64_t row_bytes, int64_t cols, int group, const int8_t* xq,
              const float* cs, const float* bt, float* y) {
  const int64_t groups = cols / group;
  __m512 acc[R][M];
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < M; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  if (Bits == 4 && (group == 64 || group % 128 == 0)) {
    // 128 columns per step from one 64-byte load of codes: low nibbles (even columns) and
    // high nibbles (odd) each meet 64 activations (chunk-128 order); with groups of 64 the
    // upper eight lanes belong to the second group.
    const __m512i mask = _mm512_set1_epi8(0x0f);
    int64_t c = 0;
    for (; c + 128 <= cols; c += 128) {
      const int64_t g = c / group;
      __m512i xl[M], xh[M];
      for (int i = 0; i < M; ++i) {
        xl[i] = _mm512_loadu_si512(xq + i * cols + c);
        xh[i] = _mm512_loadu_si512(xq + i * cols + c + 64);
      }
      for (int j = 0; j < R; ++j) {
        prefetch_ahead<R>(q + j * row_bytes, c / 2, row_bytes);
        const __m512i b = _mm512_loadu_si512(q + j * row_bytes + c / 2);
        const __m512i lo = _mm512_and_si512(b, mask);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), mask);
        for (int i = 0; i < M; ++i) {
          const __m512i dp = _mm512_dpbusd_epi32(
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xl[i]), hi, xh[i]);
          const float* f = cs + (j * M + i) * groups + g;
          const __m512 sc = group == 64
                                ? _mm512_mask_blend_ps(__mmask16(0xff00), _mm512_set1_ps(f[0]),
                                                       _mm512_set1_ps(f[1]))
                                : _mm512_set1_ps(f[0]);
          acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, acc[j][i]);
        }
      }
    }
    if (c < cols) {  // one 64-column group left (chunk-64 order)
      const int64_t g = c / group;
      for (int j = 0; j < R; ++j) {
        const __m512i qv = load_codes64<Bits>(q + j * row_bytes, c);
        for (int i = 0; i < M; ++i) {
          const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qv,
                                                 _mm512_loadu_si512(xq + i * cols + c));
          acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                                      _mm512_set1_ps(cs[(j * M + i) * groups + g]), acc[j][i]);
        }
      }
    }
  } else if (group >= 64) {
    for (int64_t g = 0; g < groups; ++g) {
      __m512i dp[R][M];
      for (int j = 0; j < R; ++j) {
        for (int i = 0; i < M; ++i) dp[j][i] = _mm512_setzero_si512();
      }
      for (int64_t c = g * group; c < (g + 1) * group; c += 64) {
        __m512i xv[M];
        for (int i = 0; i < M; ++i) xv[i] = _mm512_loadu_si512(xq + i * cols + c);
        for (int j = 0; j < R; ++j) {
          prefetch_ahead<R>(q + j * row_bytes, c * Bits / 8, row_bytes);
          const __m512i qv = load_codes64<Bits>(q + j * row_bytes, c);
          for (int i = 0; i < M; ++i) dp[j][i] = dpbusd(dp[j][i], qv, xv[i]);
        }
      }
      for (int j = 0; j < R; ++j) {
        for (int i = 0; i < M; ++i) {
          acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp[j][i]),
                                      _mm512_set1_ps(cs[(j * M + i) * groups + g]), acc[j][i]);
        }
      }
    }
  } else {
    // Group 32: a 64-column chunk holds groups g and g + 1; the lanes of g + 1 are the upper
    // half (8-bit) or the 2nd and 4th quarters (4-bit, [low | high] nibbles).
    const __mmask16 upper = Bits == 8 ? 0xff00 : 0xf0f0;
    int64_t c = 0;
    for (; c + 64 <= cols; c += 64) {
      const int64_t g = c / 32;
      __m512i xv[M];
      for (int i = 0; i < M; ++i) xv[i] = _mm512_loadu_si512(xq + i * cols + c);
      for (int j = 0; j < R; ++j) {
        prefetch_ahead<R>(q + j * row_bytes, c * Bits / 8, row_bytes);
        const __m512i qv = load_codes64<Bits>(q + j * row_bytes, c);
        for (int i = 0; i < M; ++i) {
          const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qv, xv[i]);
          const float* f = cs + (j * M + i) * groups + g;
          const __m512 sc = _mm512_mask_blend_ps(upper, _mm512_set1_ps(f[0]), _mm512_set1_ps(f[1]));
          acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, acc[j][i]);
        }
      }
    }
    if (c < cols) {  // one 32-column group left
      const int64_t g = c / 32;
      for (int j = 0; j < R; ++j) {
        const __m256i qv = load_codes32<Bits>(q + j * row_bytes, c);
        for (int i = 0; i < M; ++i) {
          const __m256i xv =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + i * cols + c));
          const __m256i dp = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qv, xv);
          const __m256 part =
              _mm256_mul_ps(_mm256_cvtepi32_ps(dp), _mm256_set1_ps(cs[(j * M + i) * groups + g]));
          acc[j][i] = _mm512_add_ps(acc[j][i], _mm512_zextps256_ps512(part));
        }
      }
    }
  }
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < M; ++i) y[i * R + j] = _mm512_reduce_add_ps(acc[j][i]) + bt[j * M + i];
  }
}

// The batch-1 decode kernels' start for R rows from r: cs[j * groups + g] = s_jg · d_g, and
// acc[j] = the bias terms b_jg · sum_g in lanes of groups (reduced with the dot products).
template <int R>
inline void begin_rows_m1(const WeightMatrix& w, int64_t r, const float* d, const float* sums,
                          float* cs, __m512* acc) {
  const int64_t groups = w.cols / w.group_size;
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; g += 16) {
    const __mmask16 k = lanes_mask(groups - g);
    const __m512 dv = _mm512_maskz_loadu_ps(k, d + g);
    const __m512 sv = _mm512_maskz_loadu_ps(k, sums + g);
    for (int j = 0; j < R; ++j) {
      const int64_t at = (r + j) * groups + g;
      const __m512 s = load_side16(w.scales, w.scale_dtype, at, k);
      _mm512_mask_storeu_ps(cs + j * groups + g, k, _mm512_mul_ps(s, dv));
      acc[j] = _mm512_fmadd_ps(load_side16(w.biases, w.scale_dtype, at, k), sv, acc[j]);
    }
  }
}

// Decode of one activation row against R rows of an 8-bit matrix from row r, groups of 64 * GV
// columns (GV = 0: w.group_size, a multiple of 64): y[j] = Σ_g s_jg · d_g · Σ(q·xq) + b_jg ·
// sum_g. The lean form of dot_rows for the common batch-1 case: the bias terms go into the
// same accumulators as the dot products (lanes of groups, reduced with them) and the factors
// are formed inline, so a row costs one reduction and no separate factor pass. Decode streams
// its weights from DRAM at a rate the instruction count per cache line limits (a pure read of
// the same bytes is ~20 % faster on one core), hence the care.
// Far: whether the kFarBytes prefetch runs (off for the steps whose far reach would leave the
// caller's rows: it would pull in another chunk's rows, at 16 threads a large part of a small
// matrix's chunk); the kNearBytes one always runs.
template <int R, int GV, bool Far>
void dot_rows8_m1(const WeightMatrix& w, int64_t r, const int8_t* xq, const float* d,
                  const float* sums, float* cs, float* y) {
  const int64_t cols = w.cols;
  const int group = GV > 0 ? 64 * GV : w.group_size;
  const int64_t groups = cols / group;
  const uint8_t* q = static_cast<const uint8_t*>(w.data) + r * cols;
  __m512 acc[R];
  begin_rows_m1<R>(w, r, d, sums, cs, acc);
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dp[R];
    for (int j = 0; j < R; ++j) dp[j] = _mm512_setzero_si512();
    for (int64_t c = g * group; c < (g + 1) * group; c += 64) {
      const int64_t near = prefetch_offset<R, kNearBytes>(c, cols);
      const int64_t far = Far ? prefetch_offset<R, kFarBytes>(c, cols) : 0;
      const __m512i xv = _mm512_loadu_si512(xq + c);
      for (int j = 0; j < R; ++j) {
        const uint8_t* p = q + j * cols + c;
        _mm_prefetch(reinterpret_cast<const char*>(p + near), _MM_HINT_T0);
        if constexpr (Far) _mm_prefetch(reinterpret_cast<const char*>(p + far), _MM_HINT_T2);
        dp[j] = dpbusd(dp[j], _mm512_loadu_si512(p), xv);
      }
    }
    for (int j = 0; j < R; ++j) {
      acc[j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp[j]), _mm512_set1_ps(cs[j * groups + g]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j] = _mm512_reduce_add_ps(acc[j]);
}

// Rows [r0, r1) of y [w.rows] for one activation row of an 8-bit matrix with groups of a
// multiple of 64 columns (dot_rows8_m1, four rows per step).
template <int GV>
void matvec8_m1(const WeightMatrix& w, const int8_t* xq, const float* d, const float* sums,
                int64_t r0, int64_t r1, float* y) {
  constexpr int R = 4;
  thread_local std::vector<float> cs;
  cs.resize(static_cast<std::size_t>(R * (w.cols / w.group_size)));
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    if ((r1 - r - R) * w.cols >= kFarBytes) {
      dot_rows8_m1<R, GV, true>(w, r, xq, d, sums, cs.data(), y + r);
    } else {
      dot_rows8_m1<R, GV, false>(w, r, xq, d, sums, cs.data(), y + r);
    }
  }
  for (; r < r1; ++r) dot_rows8_m1<1, GV, false>(w, r, xq, d, sums, cs.data(), y + r);
}

// dot_rows8_m1's 4-bit counterpart (groups of 64, G64, or a multiple of 128 columns): 128
// columns per step from one 64-byte load of codes, low nibbles (even columns) and high nibbles
// (odd) each against 64 activations (chunk-128 order); with groups of 64 the upper eight lanes
// belong to the second group, whose factor pair is spread over the halves by one permute.
template <int R, bool G64>
void dot_rows4_m1(const WeightMatrix& w, int64_t r, const int8_t* xq, const float* d,
                  const float* sums, float* cs, float* y) {
  const int64_t cols = w.cols;
  const int64_t row_bytes = cols / 2;
  const int group = w.group_size;
  const int64_t groups = cols / group;
  const uint8_t* q = static_cast<const uint8_t*>(w.data) + r * row_bytes;
  __m512 acc[R];
  begin_rows_m1<R>(w, r, d, sums, cs, acc);
  const __m512i mask = _mm512_set1_epi8(0x0f);
  const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  int64_t c = 0;
  for (; c + 128 <= cols; c += 128) {
    const int64_t g = c / group;
    const int64_t ahead = prefetch_offset<R>(c / 2, row_bytes);
    const __m512i xl = _mm512_loadu_si512(xq + c);
    const __m512i xh = _mm512_loadu_si512(xq + c + 64);
    for (int j = 0; j < R; ++j) {
      const uint8_t* p = q + j * row_bytes + c / 2;
      _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T0);
      const __m512i b = _mm512_loadu_si512(p);
      const __m512i lo = _mm512_and_si512(b, mask);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), mask);
      const __m512i dp = dpbusd(dpbusd(_mm512_setzero_si512(), lo, xl), hi, xh);
      const float* f = cs + j * groups + g;
      __m512 sc;
      if constexpr (G64) {
        double pair;
        std::memcpy(&pair, f, sizeof(pair));
        sc = _mm512_permutexvar_ps(halves,
                                   _mm512_castpd_ps(_mm512_castpd128_pd512(_mm_set_sd(pair))));
      } else {
        sc = _mm512_set1_ps(f[0]);
      }
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, acc[j]);
    }
  }
  if (c < cols) {  // one 64-column group left (chunk-64 order)
    const int64_t g = c / group;
    const __m512i xv = _mm512_loadu_si512(xq + c);
    for (int j = 0; j < R; ++j) {
      const __m512i dp = dpbusd(_mm512_setzero_si512(), load_codes64<4>(q + j * row_bytes, c), xv);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_set1_ps(cs[j * groups + g]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j] = _mm512_reduce_add_ps(acc[j]);
}

template <bool G64>
void matvec4_m1(const WeightMatrix& w, const int8_t* xq, const float* d, const float* sums,
                int64_t r0, int64_t r1, float* y) {
  constexpr int R = 4;
  thread_local std::vector<float> cs;
  cs.resize(static_cast<std::size_t>(R * (w.cols / w.group_size)));
  int64_t r = r0;
  for (; r + R <= r1; r += R) dot_rows4_m1<R, G64>(w, r, xq, d, sums, cs.data(), y + r);
  for (; r < r1; ++r) dot_rows4_m1<1, G64>(w, r, xq, d, sums, cs.data(), y + r);
}

// ---- decode on the rows16 layout (batch-invariant) ----
// One block of 16 weight rows against M activation rows: for each group g in order, the
// rows' exact int32 dots in lanes (one 64-byte load and one `vpdpbusd` per four columns, the
// activation word broadcast), then gemm_tile's sequence per lane: acc = fma(fl(float(dot) ·
// d), s, acc), acc = fma(sum, b, acc). y [M, w.rows], rows past the end not written.
template <int Bits, int M>
void rows16_block(const WeightMatrix& w, int64_t blk, const int8_t* xq, const float* d,
                  const float* sums, float* y) {
  const int64_t cols = w.cols;
  const int group = w.group_size;
  const int64_t groups = cols / group;
  const int vecs = group * Bits / 32;  // 64-byte vectors a group: 4 (8-bit) or 8 (4-bit) columns
  const uint8_t* codes = static_cast<const uint8_t*>(w.rows16) + blk * 16 * (cols * Bits / 8);
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dp[M];
    __m512i dq[M];  // a second chain: integer sums, exact in either order
    for (int i = 0; i < M; ++i) dp[i] = dq[i] = _mm512_setzero_si512();
    const uint8_t* wg = codes + g * vecs * 64;
    const int8_t* xg = xq + g * group;
    if constexpr (Bits == 8) {
      for (int k = 0; k < vecs; k += 2) {
        _mm_prefetch(reinterpret_cast<const char*>(wg + k * 64 + kNearBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wg + k * 64 + 64 + kNearBytes), _MM_HINT_T0);
        // Also kFarBytes ahead into L2, as the batch-1 kernel does: at 2 threads on issue 4's
        // host decode went 0.93-0.97x of the default path without it, 0.95-1.09x with it and
        // the GEMM's panel (S21-C2).
        _mm_prefetch(reinterpret_cast<const char*>(wg + k * 64 + kFarBytes), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(wg + k * 64 + 64 + kFarBytes), _MM_HINT_T1);
        const __m512i w0 = _mm512_loadu_si512(wg + k * 64);
        const __m512i w1 = _mm512_loadu_si512(wg + k * 64 + 64);
        for (int i = 0; i < M; ++i) {
          dp[i] = dpbusd_bcst(dp[i], w0, xg + i * cols + 4 * k);
          dq[i] = dpbusd_bcst(dq[i], w1, xg + i * cols + 4 * k + 4);
        }
      }
    } else {
      // Eight columns a row a vector: low nibbles are the even columns, high the odd; x is in
      // the matching [0, 2, 4, 6 | 1, 3, 5, 7] order (permute_even_odd, chunk 8).
      for (int o = 0; o < vecs; ++o) {
        _mm_prefetch(reinterpret_cast<const char*>(wg + o * 64 + kNearBytes), _MM_HINT_T0);
        const __m512i wv = _mm512_loadu_si512(wg + o * 64);
        const __m512i lo = _mm512_and_si512(wv, low);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), low);
        for (int i = 0; i < M; ++i) {
          dp[i] = dpbusd_bcst(dp[i], lo, xg + i * cols + 8 * o);
          dq[i] = dpbusd_bcst(dq[i], hi, xg + i * cols + 8 * o + 4);
        }
      }
    }
    for (int i = 0; i < M; ++i) dp[i] = _mm512_add_epi32(dp[i], dq[i]);
    const int64_t at = (blk * groups + g) * 16;
    const __m512 s = load_side16(w.rows16_scales, w.scale_dtype, at, 0xffff);
    const __m512 b = load_side16(w.rows16_biases, w.scale_dtype, at, 0xffff);
    for (int i = 0; i < M; ++i) {
      const __m512 part =
          _mm512_mul_ps(_mm512_cvtepi32_ps(dp[i]), _mm512_set1_ps(d[i * groups + g]));
      acc[i] = _mm512_fmadd_ps(part, s, acc[i]);
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(sums[i * groups + g]), b, acc[i]);
    }
  }
  const int64_t r0 = blk * 16;
  const __mmask16 k = lanes_mask(w.rows - r0);
  for (int i = 0; i < M; ++i) _mm512_mask_storeu_ps(y + i * w.rows + r0, k, acc[i]);
}

template <int Bits, int M>
void rows16_range(const WeightMatrix& w, const int8_t* xq, const float* d, const float* sums,
                  int64_t b0, int64_t b1, float* y) {
  for (int64_t blk = b0; blk < b1; ++blk) rows16_block<Bits, M>(w, blk, xq, d, sums, y);
}

// f(std::integral_constant<int, M>{}) for M = m activation rows (1-4; the decode kernels'
// template argument).
template <typename F>
void with_act_rows(int64_t m, F&& f) {
  switch (m) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, 4>{});
  }
}

// Rows [r0, r1) of y [M, w.rows] for quantized activations xq [M, cols], d / sums [M, groups].
template <int Bits, int M>
void matvec_range(const WeightMatrix& w, const int8_t* xq, const float* d, const float* sums,
                  int64_t r0, int64_t r1, float* y) {
  if constexpr (Bits == 8 && M == 1) {
    if (w.group_size == 64) return matvec8_m1<1>(w, xq, d, sums, r0, r1, y);
    if (w.group_size % 64 == 0) return matvec8_m1<0>(w, xq, d, sums, r0, r1, y);
  }
  if constexpr (Bits == 4 && M == 1) {
    if (w.group_size == 64) return matvec4_m1<true>(w, xq, d, sums, r0, r1, y);
    if (w.group_size % 128 == 0) return matvec4_m1<false>(w, xq, d, sums, r0, r1, y);
  }
  // Rows per step: enough independent accumulator chains to hide the FMA latency, within the
  // 32 vector registers (R x M accumulators + R x M group sums).
  constexpr int R = M <= 2 ? 4 : 2;
  const int64_t groups = w.cols / w.group_size;
  const int64_t row_bytes = w.cols * Bits / 8;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  thread_local std::vector<float> cs;
  cs.resize(static_cast<std::size_t>(R * M * groups));
  float bt[R * M];
  float out[R * M];
  for (int64_t r = r0; r < r1;) {
    const int rows = r + R <= r1 ? R : 1;
    row_factors(w, r, rows, M, d, sums, cs.data(), bt);
    if (rows == R) {
      dot_rows<Bits, R, M>(bytes + r * row_bytes, row_bytes, w.cols, w.group_size, xq, cs.data(),
                           bt, out);
    } else {
      dot_rows<Bits, 1, M>(bytes + r * row_bytes, row_bytes, w.cols, w.group_size, xq, cs.data(),
                           bt, out);
    }
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < rows; ++j) y[i * w.rows + r + j] = out[i * rows + j];
    }
    r += rows;
  }
}

// The permute_even_odd chunk of the decode kernels (dot_rows) for w.
int decode_chunk(const WeightMatrix& w) {
  return w.bits == 4 && (w.group_size == 64 || w.group_size % 128 == 0) ? 128 : 64;
}

void int8_matvec(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  const int64_t groups = w.cols / w.group_size;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> d, sums;
  xq.resize(static_cast<std::size_t>(m * w.cols));
  d.resize(static_cast<std::size_t>(m * groups));
  sums.resize(d.size());
  const bool rows16 = w.rows16 != nullptr;
  for (int64_t i = 0; i < m; ++i) {
    quantize_row(x + i * w.cols, w.cols, w.group_size, w.bits, rows16 ? 8 : decode_chunk(w),
                 xq.data() + i * w.cols, d.data() + i * groups, sums.data() + i * groups, 1);
  }
  const int8_t* q = xq.data();
  const float* dp = d.data();
  const float* sp = sums.data();
  // Units of work: 16-row blocks of the rows16 layout, or single rows of the row-major codes.
  const int64_t units = rows16 ? (w.rows + 15) / 16 : w.rows;
  auto body = [&](int64_t u0, int64_t u1) {
    with_act_rows(m, [&](auto rows) {
      constexpr int M = decltype(rows)::value;
      if (rows16) {
        w.bits == 8 ? rows16_range<8, M>(w, q, dp, sp, u0, u1, y)
                    : rows16_range<4, M>(w, q, dp, sp, u0, u1, y);
      } else {
        w.bits == 8 ? matvec_range<8, M>(w, q, dp, sp, u0, u1, y)
                    : matvec_range<4, M>(w, q, dp, sp, u0, u1, y);
      }
    });
  };
  if (w.rows * w.cols * m < kMinParallelWork) {
    body(0, units);
  } else {
    ctx.pool.parallel_for(units, rows16 ? 1 : 8, body);
  }
}

// ---- prefill: register-tiled GEMM ----

// y[l * y_stride + j] = Σ_g s_jg · d_lg · Σ(q·xq) + b_jg · sum_lg over all groups, for R weight
// rows and 16 V activation rows of one tile: codes of row j at w + j * w_stride (u8, 4-bit in
// permute order); xt is the tile's activations as [cols / 4, kActTile, 4] int8, so one vector
// is 16 rows x 4 columns and one broadcast 32-bit word of a weight row meets it in
// `vpdpbusd`; ds / gs: [groups, ds_stride] activation scales and sums from the tile's first
// row; ws / wb: [R, groups] weight scales and biases. Steps = group / 4 (0: `group` at run
// time). Results go to out [R, kActTile] (weight row major, contiguous vector stores).
template <int R, int V, int Steps>
void gemm_tile(const uint8_t* w, int64_t w_stride, int64_t groups, int group, const int8_t* xt,
               const float* ds, const float* gs, int64_t ds_stride, const float* ws,
               const float* wb, float* out) {
  const int steps = Steps > 0 ? Steps : group / 4;
  __m512 acc[R][V];
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) acc[j][v] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dp[R][V];
    for (int j = 0; j < R; ++j) {
      for (int v = 0; v < V; ++v) dp[j][v] = _mm512_setzero_si512();
    }
    const int8_t* xg = xt + g * steps * kActTile * 4;
    const uint8_t* wg = w + g * steps * 4;
    for (int kk = 0; kk < steps; ++kk) {
      __m512i xv[V];
      for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_si512(xg + (kk * kActTile + 16 * v) * 4);
      for (int j = 0; j < R; ++j) {
        int32_t word;
        std::memcpy(&word, wg + j * w_stride + kk * 4, 4);
        const __m512i wv = _mm512_set1_epi32(word);
        for (int v = 0; v < V; ++v) dp[j][v] = dpbusd(dp[j][v], wv, xv[v]);
      }
    }
    for (int v = 0; v < V; ++v) {
      const __m512 dv = _mm512_loadu_ps(ds + g * ds_stride + 16 * v);
      const __m512 sv = _mm512_loadu_ps(gs + g * ds_stride + 16 * v);
      for (int j = 0; j < R; ++j) {
        const __m512 part = _mm512_mul_ps(_mm512_cvtepi32_ps(dp[j][v]), dv);
        acc[j][v] = _mm512_fmadd_ps(part, _mm512_set1_ps(ws[j * groups + g]), acc[j][v]);
        acc[j][v] = _mm512_fmadd_ps(sv, _mm512_set1_ps(wb[j * groups + g]), acc[j][v]);
      }
    }
  }
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + j * kActTile + 16 * v, acc[j][v]);
  }
}

// Weight rows [0, rows) of one block against one activation tile: kTileRows rows per step,
// then 4, 2 and 1; out [rows, kActTile].
template <int V, int Steps>
void gemm_rows(const uint8_t* w, int64_t w_stride, int64_t rows, int64_t groups, int group,
               const int8_t* xt, const float* ds, const float* gs, int64_t ds_stride,
               const float* ws, const float* wb, float* out) {
  int64_t r = 0;
  auto run = [&]<int R>() {
    gemm_tile<R, V, Steps>(w + r * w_stride, w_stride, groups, group, xt, ds, gs, ds_stride,
                           ws + r * groups, wb + r * groups, out + r * kActTile);
    r += R;
  };
  while (r + kTileRows <= rows) run.template operator()<kTileRows>();
  while (r + 4 <= rows) run.template operator()<4>();
  while (r + 2 <= rows) run.template operator()<2>();
  while (r < rows) run.template operator()<1>();
}

template <int V>
void gemm_rows(const uint8_t* w, int64_t w_stride, int64_t rows, int64_t groups, int group,
               const int8_t* xt, const float* ds, const float* gs, int64_t ds_stride,
               const float* ws, const float* wb, float* out) {
  auto rows_of = [&]<int Steps>() {
    gemm_rows<V, Steps>(w, w_stride, rows, groups, group, xt, ds, gs, ds_stride, ws, wb, out);
  };
  switch (group) {
    case 32:
      return rows_of.template operator()<8>();
    case 64:
      return rows_of.template operator()<16>();
    case 128:
      return rows_of.template operator()<32>();
    default:
      return rows_of.template operator()<0>();
  }
}

// Words [k0, k0 + words) (words <= 16) of the 16 rows of a rows16 block starting at src,
// back in rows: t[l] holds row l's words, zero past `words` (interleave_rows16 in reverse).
inline void block_words(const uint8_t* src, int64_t k0, int64_t words, __m512 t[16]) {
  for (int q = 0; q < 16; ++q) {
    t[q] = q < words ? _mm512_loadu_ps(src + (k0 + q) * 64) : _mm512_setzero_ps();
  }
  transpose16(t);
}

// The GEMM's panel for 8-bit weight rows [r0, r0 + n) (r0 a multiple of 16, n <= kBlockRows)
// from the rows16 layout: each 16 x 16 tile of 32-bit words transposed back into 16 row-major
// runs of 64 bytes (interleave_rows16 in reverse), so the panel holds the file's codes.
// Reading the layout in place instead (tiles broadcasting from the interleaved words) lost
// 8-bit prefill on issue 4's host at 2 threads (S21-C1/C2). panel [n rounded up to 16, cols].
void rows16_panel8(const WeightMatrix& w, int64_t r0, int64_t n, uint8_t* panel) {
  const int64_t row_bytes = w.cols;
  const int64_t quads = row_bytes / 4;
  for (int64_t s = 0; s < n; s += 16) {
    const uint8_t* src = static_cast<const uint8_t*>(w.rows16) + (r0 + s) * row_bytes;
    uint8_t* dst = panel + s * row_bytes;
    for (int64_t k0 = 0; k0 < quads; k0 += 16) {
      const int64_t words = std::min<int64_t>(16, quads - k0);
      __m512 t[16];
      block_words(src, k0, words, t);
      for (int l = 0; l < 16; ++l) {
        _mm512_mask_storeu_ps(dst + l * row_bytes + k0 * 4, lanes_mask(words), t[l]);
      }
    }
  }
}

// One row of 4-bit codes (packed at src, cols / 2 bytes) unpacked to bytes in permute order
// with `chunk`-column chunks (64, or 32 for 32-column groups): out [cols].
void unpack4_row(const uint8_t* src, int64_t cols, int chunk, uint8_t* out) {
  int64_t c = 0;
  if (chunk == 64) {
    for (; c + 64 <= cols; c += 64) _mm512_storeu_si512(out + c, load_codes64<4>(src, c));
  }
  for (; c + 32 <= cols; c += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), load_codes32<4>(src, c));
  }
}

// The GEMM's panel for 4-bit weight rows [r0, r0 + n) (r0 a multiple of 16, n <= kBlockRows)
// read from the rows16 layout: the bytes unpack4_row gives from the row-major codes, so the
// GEMM's output does not depend on which copy it reads. Each 16 x 16 tile of 32-bit words is
// one transpose16 (interleave_rows16 in reverse), a row's 128 columns then unpacked in
// registers; a row's last words (under 16) come through a zero-padded tile and unpack4_row.
// panel [n rounded up to 16, cols]; rows past the matrix's end get the layout's zeros.
void rows16_panel(const WeightMatrix& w, int64_t r0, int64_t n, int chunk, uint8_t* panel) {
  const int64_t row_bytes = w.cols / 2;
  const int64_t quads = row_bytes / 4;
  const __m512i low = _mm512_set1_epi8(0x0f);
  // unpack4_row's order for 128 columns from their [low | high] nibble vectors, in 128-bit
  // lanes: chunk 64 [lo0 lo1 hi0 hi1][lo2 lo3 hi2 hi3], chunk 32 [lo0 hi0 lo1 hi1][lo2 hi2 ..].
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int64_t s = 0; s < n; s += 16) {
    const uint8_t* src = static_cast<const uint8_t*>(w.rows16) + (r0 + s) * row_bytes;
    uint8_t* dst = panel + s * w.cols;
    for (int64_t k0 = 0; k0 < quads; k0 += 16) {
      const int64_t words = std::min<int64_t>(16, quads - k0);
      __m512 t[16];
      block_words(src, k0, words, t);
      for (int l = 0; l < 16; ++l) {
        uint8_t* o = dst + l * w.cols + k0 * 8;
        if (words < 16) {
          alignas(64) uint8_t packed[64];
          _mm512_store_ps(packed, t[l]);
          unpack4_row(packed, words * 8, chunk, o);
          continue;
        }
        const __m512i row = _mm512_castps_si512(t[l]);
        const __m512i lo = _mm512_and_si512(row, low);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(row, 4), low);
        if (chunk == 64) {
          _mm512_storeu_si512(o, _mm512_shuffle_i64x2(lo, hi, 0x44));
          _mm512_storeu_si512(o + 64, _mm512_shuffle_i64x2(lo, hi, 0xee));
        } else {
          _mm512_storeu_si512(o, _mm512_permutex2var_epi64(lo, first, hi));
          _mm512_storeu_si512(o + 64, _mm512_permutex2var_epi64(lo, second, hi));
        }
      }
    }
  }
}

// Scales and biases of weight rows [r0, r0 + n) as f32: ws / wb [n, groups] (rows16: [n rounded
// up to 16, groups], from the interleaved copies through transpose16).
void block_sides(const WeightMatrix& w, int64_t r0, int64_t n, float* ws, float* wb) {
  const int64_t groups = w.cols / w.group_size;
  if (w.rows16 != nullptr) {
    for (int64_t s = 0; s < n; s += 16) {
      const int64_t blk = (r0 + s) / 16;
      for (int64_t g0 = 0; g0 < groups; g0 += 16) {
        const int64_t count = std::min<int64_t>(16, groups - g0);
        for (auto [side, out] : {std::pair{w.rows16_scales, ws}, std::pair{w.rows16_biases, wb}}) {
          __m512 t[16];  // t[q]: group g0 + q of the block's 16 rows
          for (int q = 0; q < 16; ++q) {
            t[q] = q < count
                       ? load_side16(side, w.scale_dtype, (blk * groups + g0 + q) * 16, 0xffff)
                       : _mm512_setzero_ps();
          }
          transpose16(t);
          for (int l = 0; l < 16; ++l) {
            _mm512_mask_storeu_ps(out + (s + l) * groups + g0, lanes_mask(count), t[l]);
          }
        }
      }
    }
    return;
  }
  for (int64_t r = r0; r < r0 + n; ++r) {
    for (int64_t g = 0; g < groups; g += 16) {
      const __mmask16 k = lanes_mask(groups - g);
      const int64_t at = r * groups + g;
      _mm512_mask_storeu_ps(ws + (r - r0) * groups + g, k,
                            load_side16(w.scales, w.scale_dtype, at, k));
      _mm512_mask_storeu_ps(wb + (r - r0) * groups + g, k,
                            load_side16(w.biases, w.scale_dtype, at, k));
    }
  }
}

// Prefill: activations quantized once into tiles of kActTile rows; each thread takes blocks of
// kBlockRows weight rows (scales converted and 4-bit codes unpacked once per block, kept in
// L2) and runs every activation tile against them over the whole depth, so each output is
// stored once. With w.rows16 the block's codes come from that copy (4-bit: rows16_panel, the
// same panel bytes; 8-bit: read in place, the same words), so the output is bitwise the same
// and w.data is not read.
void int8_gemm(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  const int group = w.group_size;
  const int64_t cols = w.cols;
  const int64_t groups = cols / group;
  const int64_t words = cols / 4;
  const int chunk = group == 32 ? 32 : 64;
  const int64_t mp = (m + kActTile - 1) / kActTile * kActTile;
  // xt: [mp / kActTile, cols / 4, kActTile, 4] quantized activations (each tile contiguous);
  // ds / gs: [groups, mp]. Padding rows zero.
  thread_local std::vector<int8_t> xt;
  thread_local std::vector<float> ds, gs;
  xt.resize(static_cast<std::size_t>(cols * mp));
  ds.resize(static_cast<std::size_t>(groups * mp));
  gs.resize(ds.size());
  int8_t* xtp = xt.data();
  float* dsp = ds.data();
  float* gsp = gs.data();
  // 16 rows at a time (chunks start at multiples of 16): quantized into `tile` [16, cols],
  // then 16 x 16 blocks of 32-bit words transposed in registers into xt.
  ctx.pool.parallel_for(mp, 16, [&](int64_t a, int64_t b) {
    thread_local std::vector<int8_t> tile;
    tile.resize(static_cast<std::size_t>(16 * cols));
    for (int64_t i0 = a; i0 < b; i0 += 16) {
      for (int64_t i = i0; i < i0 + 16; ++i) {
        int8_t* row = tile.data() + (i - i0) * cols;
        if (i < m) {
          quantize_row(x + i * cols, cols, group, w.bits, chunk, row, dsp + i, gsp + i, mp);
        } else {
          std::fill(row, row + cols, int8_t{0});
          for (int64_t g = 0; g < groups; ++g) dsp[g * mp + i] = gsp[g * mp + i] = 0.0f;
        }
      }
      // Word kk of rows i0..i0+15 goes to xt[tile, kk, i0 % kActTile .. + 15].
      int8_t* dst = xtp + (i0 / kActTile) * words * kActTile * 4 + (i0 % kActTile) * 4;
      int64_t kk = 0;
      for (; kk + 16 <= words; kk += 16) {
        __m512 r[16];
        for (int t = 0; t < 16; ++t) {
          r[t] = _mm512_castsi512_ps(_mm512_loadu_si512(tile.data() + t * cols + kk * 4));
        }
        transpose16(r);
        for (int c = 0; c < 16; ++c) {
          _mm512_storeu_si512(dst + (kk + c) * kActTile * 4, _mm512_castps_si512(r[c]));
        }
      }
      for (; kk < words; ++kk) {
        for (int t = 0; t < 16; ++t) {
          std::memcpy(dst + kk * kActTile * 4 + t * 4, tile.data() + t * cols + kk * 4, 4);
        }
      }
    }
  });
  const int64_t row_bytes = cols * w.bits / 8;
  const bool rows16 = w.rows16 != nullptr;
  // With rows16, chunks of whole blocks, so that each block starts at a multiple of 16 rows.
  ctx.pool.parallel_for(w.rows, rows16 ? kBlockRows : kTileRows, [&](int64_t a, int64_t b) {
    thread_local std::vector<uint8_t> panel;  // [kBlockRows, cols]: 4-bit unpacked, 8-bit rows16
    thread_local std::vector<float> ws, wb;   // [kBlockRows, groups]
    alignas(64) float out[kBlockRows * kActTile];
    ws.resize(static_cast<std::size_t>(kBlockRows * groups));
    wb.resize(ws.size());
    if (w.bits == 4 || rows16) panel.resize(static_cast<std::size_t>(kBlockRows * cols));
    for (int64_t r0 = a; r0 < b; r0 += kBlockRows) {
      const int64_t r1 = std::min(b, r0 + kBlockRows);
      block_sides(w, r0, r1 - r0, ws.data(), wb.data());
      // The block's codes as gemm_rows reads them: a row-major panel (4-bit; 8-bit from the
      // rows16 layout) or w.data (8-bit).
      const uint8_t* codes = panel.data();
      int64_t stride = cols;
      if (w.bits == 4 && rows16) {
        rows16_panel(w, r0, r1 - r0, chunk, panel.data());
      } else if (w.bits == 4) {
        for (int64_t r = r0; r < r1; ++r) {
          unpack4_row(static_cast<const uint8_t*>(w.data) + r * row_bytes, cols, chunk,
                      panel.data() + (r - r0) * cols);
        }
      } else if (rows16) {
        rows16_panel8(w, r0, r1 - r0, panel.data());
      } else {
        codes = static_cast<const uint8_t*>(w.data) + r0 * row_bytes;
        stride = row_bytes;
      }
      for (int64_t i0 = 0; i0 < m; i0 += kActTile) {
        const int64_t valid = std::min(kActTile, m - i0);
        const int8_t* xtile = xtp + (i0 / kActTile) * words * kActTile * 4;
        auto tile = [&]<int V>() {
          gemm_rows<V>(codes, stride, r1 - r0, groups, group, xtile, dsp + i0, gsp + i0, mp,
                       ws.data(), wb.data(), out);
        };
        if (valid > 16) {
          tile.template operator()<2>();
        } else {
          tile.template operator()<1>();
        }
        // out [rows of the block, kActTile] -> y rows i0.., columns r0..r1: 16 x 16 blocks
        // transposed in registers, then contiguous runs of 16.
        int64_t r = r0;
        for (; r + 16 <= r1; r += 16) {
          for (int64_t l0 = 0; l0 < valid; l0 += 16) {
            __m512 t[16];
            for (int q = 0; q < 16; ++q) t[q] = _mm512_load_ps(out + (r - r0 + q) * kActTile + l0);
            transpose16(t);
            for (int64_t l = l0; l < std::min(valid, l0 + 16); ++l) {
              _mm512_storeu_ps(y + (i0 + l) * w.rows + r, t[l - l0]);
            }
          }
        }
        for (int64_t l = 0; l < valid; ++l) {
          float* yr = y + (i0 + l) * w.rows;
          for (int64_t rr = r; rr < r1; ++rr) yr[rr] = out[(rr - r0) * kActTile + l];
        }
      }
    }
  });
}

}  // namespace

#endif  // HEARTH_CPU_VNNI

bool int8_linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  if (!int8_dot_supported(w)) return false;
#ifdef HEARTH_CPU_VNNI
  if (m <= kMatVecRows) {
    int8_matvec(ctx, w, x, m, y);
  } else {
    int8_gemm(ctx, w, x, m, y);
  }
  return true;
#else
  (void)ctx, (void)x, (void)m, (void)y;
  return false;
#endif
}

}  // namespace hearth::kernels::cpu
