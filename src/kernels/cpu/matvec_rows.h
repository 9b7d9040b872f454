// One weight row against M activation rows (M <= kMatVecMaxRows) for the decode mat-vec:
// the weight row is read once and every activation row consumes it, and quantized groups
// accumulate in vector registers (one horizontal sum per row, not per group). AVX-512 when
// the build targets it (HEARTH_NATIVE on an AVX-512 machine, or -mavx512f -mavx512bw);
// otherwise ops.cpp keeps the AVX2 dot products of simd.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/simd.h"
#include "kernels/weight.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define HEARTH_CPU_AVX512 1
#endif

namespace hearth::kernels::cpu {

#ifdef HEARTH_CPU_AVX512

inline __m512 load_bf16x16(const uint16_t* p) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_w16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_w16(const uint16_t* p, DType dtype) {
  return dtype == DType::kBF16 ? load_bf16x16(p) : load_f16x16(p);
}

// y[i * R + j] = w_row(r + j) · x[i] for R consecutive float / bf16 / f16 rows and M
// activation rows `stride` apart: each loaded activation vector feeds R rows and each
// weight vector M rows (R x M accumulators in registers).
template <int R, int M>
void dense_rows_avx512(const WeightMatrix& w, int64_t r, const float* x, int64_t stride, float* y) {
  const int64_t cols = w.cols;
  __m512 acc[R][M];
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < M; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  auto load = [&](int j, int64_t at) {
    if (w.dtype == DType::kF32) {
      return _mm512_loadu_ps(static_cast<const float*>(w.data) + (r + j) * cols + at);
    }
    return load_w16(static_cast<const uint16_t*>(w.data) + (r + j) * cols + at, w.dtype);
  };
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    __m512 wv[R];
    for (int j = 0; j < R; ++j) wv[j] = load(j, c);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * stride + c);
      for (int j = 0; j < R; ++j) acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
    }
  }
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < M; ++i) {
      float s = _mm512_reduce_add_ps(acc[j][i]);
      for (int64_t t = c; t < cols; ++t) {
        s += read_scalar(w.data, w.dtype, (r + j) * cols + t) * x[i * stride + t];
      }
      y[i * R + j] = s;
    }
  }
}

// 16 quantized values of a group as floats: 8-bit from 16 bytes, 4-bit from 8 bytes.
inline __m512 load_q8x16(const uint8_t* q) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
}
inline __m512 load_q4x16(const uint8_t* q) {
  // Each byte holds two values, the lower nibble first: duplicate the bytes, then shift
  // odd lanes by 4.
  __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  __m512i lanes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
  const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  return _mm512_cvtepi32_ps(
      _mm512_and_si512(_mm512_srlv_epi32(lanes, shifts), _mm512_set1_epi32(0xf)));
}

// Rows [r0, r1), columns [c0, c1) (whole groups) of a quantized matrix (group size a
// multiple of 16) as f32, w = s * q + b, into out: [r1 - r0, c1 - c0]. Prefill dequantizes a
// tile once into this panel and runs a dense register-tiled kernel over it.
template <int Bits>
void dequant_rows_avx512(const WeightMatrix& w, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                         float* out) {
  const int64_t groups = w.cols / w.group_size;
  const int64_t row_bytes = w.cols * Bits / 8;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* q = bytes + r * row_bytes;
    float* o = out + (r - r0) * (c1 - c0) - c0;
    for (int64_t g = c0 / w.group_size; g < c1 / w.group_size; ++g) {
      const __m512 sc = _mm512_set1_ps(read_scalar(w.scales, w.scale_dtype, r * groups + g));
      const __m512 bi = _mm512_set1_ps(read_scalar(w.biases, w.scale_dtype, r * groups + g));
      const uint8_t* qg = q + g * w.group_size * Bits / 8;
      float* og = o + g * w.group_size;
      for (int c = 0; c < w.group_size; c += 16) {
        const __m512 qf = Bits == 8 ? load_q8x16(qg + c) : load_q4x16(qg + c / 2);
        _mm512_storeu_ps(og + c, _mm512_fmadd_ps(qf, sc, bi));
      }
    }
  }
}

// y[i * R + j] = sum_g scale_jg (q_jg · x_ig) + bias_jg sum(x_ig) for R consecutive quantized
// rows (row j at q + j * row_bytes; group sizes a multiple of 16) and M activation rows.
// `scales` / `biases`: [R, groups] as floats; `group_sums`: [M, groups] sums of x over each
// group.
template <int R, int M, int Bits>
void quant_rows_avx512(const uint8_t* q, int64_t row_bytes, int64_t cols, int group_size,
                       const float* scales, const float* biases, const float* x, int64_t stride,
                       const float* group_sums, float* y) {
  const int64_t groups = cols / group_size;
  __m512 acc[R][M];
  float bias_acc[R][M];
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < M; ++i) {
      acc[j][i] = _mm512_setzero_ps();
      bias_acc[j][i] = 0.0f;
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m512 gacc[R][M];
    for (int j = 0; j < R; ++j) {
      for (int i = 0; i < M; ++i) gacc[j][i] = _mm512_setzero_ps();
    }
    const int64_t group_offset = g * group_size * Bits / 8;
    for (int c = 0; c < group_size; c += 16) {
      __m512 qf[R];
      for (int j = 0; j < R; ++j) {
        const uint8_t* qg = q + j * row_bytes + group_offset;
        qf[j] = Bits == 8 ? load_q8x16(qg + c) : load_q4x16(qg + c / 2);
      }
      for (int i = 0; i < M; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + i * stride + g * group_size + c);
        for (int j = 0; j < R; ++j) gacc[j][i] = _mm512_fmadd_ps(qf[j], xv, gacc[j][i]);
      }
    }
    for (int j = 0; j < R; ++j) {
      const __m512 sc = _mm512_set1_ps(scales[j * groups + g]);
      for (int i = 0; i < M; ++i) {
        acc[j][i] = _mm512_fmadd_ps(sc, gacc[j][i], acc[j][i]);
        bias_acc[j][i] += biases[j * groups + g] * group_sums[i * groups + g];
      }
    }
  }
  for (int j = 0; j < R; ++j) {
    for (int i = 0; i < M; ++i) y[i * R + j] = _mm512_reduce_add_ps(acc[j][i]) + bias_acc[j][i];
  }
}

#endif  // HEARTH_CPU_AVX512

}  // namespace hearth::kernels::cpu
