// Inner loops of the CPU kernels: dot products of f32 activations with f32 / bf16 / f16
// / packed 4- and 8-bit weights. AVX2 + FMA when the build targets them (HEARTH_NATIVE,
// the default, or -mavx2 -mfma), a portable loop otherwise. AVX-512 builds run the decode
// mat-vec through matvec_rows.h instead.
#pragma once

#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define HEARTH_CPU_AVX2 1
#endif

#include "tensor/dtype.h"

namespace hearth::kernels::cpu {

// The instruction set this build's kernels use ("avx2+fma" or "scalar").
const char* simd_name();

#ifdef HEARTH_CPU_AVX2
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}
inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#endif

inline float dot_f32(const float* w, const float* x, int64_t n) {
  int64_t i = 0;
  float tail = 0.0f;
#ifdef HEARTH_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
  tail = hsum(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) tail += w[i] * x[i];
  return tail;
}

inline float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  int64_t i = 0;
  float tail = 0.0f;
#ifdef HEARTH_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(load_bf16x8(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(load_bf16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16x8(w + i), _mm256_loadu_ps(x + i), a0);
  tail = hsum(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) tail += bf16_to_f32(w[i]) * x[i];
  return tail;
}

inline float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  int64_t i = 0;
  float tail = 0.0f;
#ifdef HEARTH_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16x8(w + i), _mm256_loadu_ps(x + i), a0);
  tail = hsum(a0);
#endif
  for (; i < n; ++i) tail += f16_to_f32(w[i]) * x[i];
  return tail;
}

// sum_i q_i * x_i over one group of 8-bit values (group_size a multiple of 4).
inline float qdot8(const uint32_t* words, const float* x, int group_size) {
  const auto* q = reinterpret_cast<const uint8_t*>(words);  // little-endian: element order
  int i = 0;
  float tail = 0.0f;
#ifdef HEARTH_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; i + 16 <= group_size; i += 16) {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
    a0 = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x + i + 8), a1);
  }
  tail = hsum(_mm256_add_ps(a0, a1));
#endif
  for (; i < group_size; ++i) tail += static_cast<float>(q[i]) * x[i];
  return tail;
}

// sum_i q_i * x_i over one group of 4-bit values (group_size a multiple of 8).
inline float qdot4(const uint32_t* words, const float* x, int group_size) {
  int i = 0;
  float tail = 0.0f;
#ifdef HEARTH_CPU_AVX2
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i mask = _mm256_set1_epi32(0xf);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; i + 16 <= group_size; i += 16) {
    __m256i w0 = _mm256_set1_epi32(static_cast<int>(words[i / 8]));
    __m256i w1 = _mm256_set1_epi32(static_cast<int>(words[i / 8 + 1]));
    __m256 q0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(w0, shifts), mask));
    __m256 q1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(w1, shifts), mask));
    a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + i + 8), a1);
  }
  tail = hsum(_mm256_add_ps(a0, a1));
#endif
  for (; i < group_size; ++i) {
    tail += static_cast<float>((words[i / 8] >> ((i % 8) * 4)) & 0xfu) * x[i];
  }
  return tail;
}

}  // namespace hearth::kernels::cpu
