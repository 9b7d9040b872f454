// Dense prefill GEMM (see gemm_dense.h). Loop nest, per thread over its chunk of weight rows:
//   for each block of up to kNc weight rows
//     for each kc-deep column slice: convert + transpose the block's rows into 32-row k-major
//                                    panels ([panels][kc][32] f32, L2)
//       for each block of kMcTiles activation tiles (their slice stays in L2)
//         for each 32-row panel (L1)
//           for each 14-row activation tile: 14 x 32 register tile over kc, added into y
// The activations are packed once per call (all threads) into [tile][cols][rows of the tile]
// so a tile's kc-deep slice is one contiguous run: no strided streams that alias in the
// cache sets. Each thread reads the packed activations once per weight-row block; the weights
// are read from memory once per call.
// The AVX-512 intrinsics header first (kernels/cpu/intrinsics.h says why).
#include "kernels/cpu/intrinsics.h"

#include "kernels/cpu/gemm_dense.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <utility>

#include "base/check.h"
#include "kernels/cpu/matvec_rows.h"

namespace hearth::kernels::cpu {

bool dense_gemm_supported(const WeightMatrix& w) {
#ifdef HEARTH_CPU_AVX512
  return !w.quantized() &&
         (w.dtype == DType::kF32 || w.dtype == DType::kBF16 || w.dtype == DType::kF16);
#else
  (void)w;
  return false;
#endif
}

bool dense_gemm_quantized_supported(const WeightMatrix& w) {
#ifdef HEARTH_CPU_AVX512
  return w.quantized() && (w.bits == 4 || w.bits == 8) && w.group_size % 16 == 0 &&
         w.data != nullptr;
#else
  (void)w;
  return false;
#endif
}

#ifdef HEARTH_CPU_AVX512
namespace {

// Weight rows per register tile (two vectors).
constexpr int64_t kNr = 32;
// Columns per slice: a [kKc, 32] f32 weight panel is 32 KiB, within the 48 KiB L1.
constexpr int64_t kKc = 256;
// Weight rows converted per slice (their panels, [kNc, kKc] f32 = 256 KiB, stay in L2).
constexpr int64_t kNc = 256;
// Activation tiles per L2 block ([24 * 14, kKc] f32 = 336 KiB).
constexpr int64_t kMcTiles = 24;

// A float buffer whose data starts on a 64-byte boundary, grown without zero-filling (every
// element is written before it is read).
class AlignedFloats {
 public:
  float* get(int64_t n) {
    if (n > capacity_) {
      buf_.reset(new float[static_cast<std::size_t>(n + 16)]);
      capacity_ = n;
    }
    auto addr = reinterpret_cast<uintptr_t>(buf_.get());
    return buf_.get() + ((64 - addr % 64) % 64) / sizeof(float);
  }

 private:
  std::unique_ptr<float[]> buf_;
  int64_t capacity_ = 0;
};

// Packed activations up to this many floats (64 MiB) keep their buffer for the next call
// (a 512-token 1B prefill needs 16 MiB); larger ones get a buffer for the call alone.
constexpr int64_t kKeepActivationFloats = int64_t{1} << 24;

__mmask16 lanes_mask(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF)
                     : static_cast<__mmask16>((1u << std::max<int64_t>(count, 0)) - 1u);
}

// r[j] <- column j of the 16 x 16 matrix whose row i is r[i].
void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + c], lane l: column 4l + c of rows 4g..4g+3.
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]);
    const __m512d b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]);
    const __m512d d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Column 4l + c gathers lane l of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// Columns [c, c + 16) of weight row r as f32, lanes past `count` zero. Quantized (4/8-bit,
// group size a multiple of 16, c a multiple of 16, all 16 lanes): s * q + b, as
// dequant_rows_avx512 computes it.
__m512 load_weight16(const WeightMatrix& w, int64_t r, int64_t c, __mmask16 mask) {
  if (w.quantized()) {
    const int64_t at = r * (w.cols / w.group_size) + c / w.group_size;
    const __m512 sc = _mm512_set1_ps(read_scalar(w.scales, w.scale_dtype, at));
    const __m512 bi = _mm512_set1_ps(read_scalar(w.biases, w.scale_dtype, at));
    const uint8_t* q = static_cast<const uint8_t*>(w.data) + r * (w.cols * w.bits / 8);
    const __m512 qf = w.bits == 8 ? load_q8x16(q + c) : load_q4x16(q + c / 2);
    return _mm512_fmadd_ps(qf, sc, bi);
  }
  if (w.dtype == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w.data) + r * w.cols + c);
  }
  const __m256i raw =
      _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w.data) + r * w.cols + c);
  if (w.dtype == DType::kBF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  return _mm512_cvtph_ps(raw);
}

// Column c of the 16 rows of group g of w's panels16 copy as f32 (exact).
__m512 load_group_column(const WeightMatrix& w, int64_t g, int64_t c) {
  const int64_t at = (g * w.cols + c) * 16;
  if (w.dtype == DType::kF32) return load_w16(static_cast<const float*>(w.panels16) + at);
  return load_w16(static_cast<const uint16_t*>(w.panels16) + at, w.dtype);
}

// Weight rows [r0, r1), columns [k0, k0 + kc) as f32 panels of kNr rows, k-major:
// wp[(p * kc + k) * kNr + j] = w[r0 + p * kNr + j][k0 + k], zero for rows past r1.
void pack_weights(const WeightMatrix& w, int64_t r0, int64_t r1, int64_t k0, int64_t kc,
                  float* wp) {
  for (int64_t p0 = r0; p0 < r1; p0 += kNr) {
    float* panel = wp + (p0 - r0) / kNr * kc * kNr;
    for (int64_t h = 0; h < kNr; h += 16) {
      const int64_t rows = std::min<int64_t>(16, r1 - p0 - h);
      if (w.panels16 != nullptr) {
        // Groups start at multiples of 16 (r0 is a multiple of kNr); a group's rows past
        // w.rows are zero in the copy, and a group wholly past r1 packs as zero.
        for (int64_t k = 0; k < kc; ++k) {
          _mm512_storeu_ps(panel + k * kNr + h, rows > 0
                                                    ? load_group_column(w, (p0 + h) / 16, k0 + k)
                                                    : _mm512_setzero_ps());
        }
        continue;
      }
      for (int64_t kb = 0; kb < kc; kb += 16) {
        const int64_t count = std::min<int64_t>(16, kc - kb);
        const __mmask16 mask = lanes_mask(count);
        __m512 v[16];
        for (int64_t i = 0; i < 16; ++i) {
          v[i] = i < rows ? load_weight16(w, p0 + h + i, k0 + kb, mask) : _mm512_setzero_ps();
        }
        transpose16(v);
        for (int64_t k = 0; k < count; ++k) _mm512_storeu_ps(panel + (kb + k) * kNr + h, v[k]);
      }
    }
  }
}

// Activation tile t (rows [t * kGemmMr, + rows)) of x [m, cols] transposed into
// xp[k * rows + i] (the tile's base at t * kGemmMr * cols).
void pack_activations(const float* x, int64_t cols, int64_t row0, int64_t rows, float* xp) {
  const __mmask16 row_mask = lanes_mask(rows);
  for (int64_t k0 = 0; k0 < cols; k0 += 16) {
    const int64_t count = std::min<int64_t>(16, cols - k0);
    const __mmask16 mask = lanes_mask(count);
    __m512 v[16];
    for (int64_t i = 0; i < 16; ++i) {
      v[i] =
          i < rows ? _mm512_maskz_loadu_ps(mask, x + (row0 + i) * cols + k0) : _mm512_setzero_ps();
    }
    transpose16(v);
    for (int64_t k = 0; k < count; ++k) _mm512_mask_storeu_ps(xp + (k0 + k) * rows, row_mask, v[k]);
  }
}

// y[i * ldy + j] (+)= sum_k xp[k * MR + i] * wp[k * kNr + j] for MR activation rows and the
// 32 weight rows of a panel (lanes masked by m0 / m1 stored), added to y when `accumulate`.
template <int MR>
void gemm_tile(const float* xp, const float* wp, int64_t kc, float* y, int64_t ldy, __mmask16 m0,
               __mmask16 m1, bool accumulate) {
  // Loops over the tile's rows fully unrolled so the accumulators stay in registers (a
  // rolled epilogue spilled all 28 to the stack: ~3 % at 1 thread).
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    c0[i] = _mm512_setzero_ps();
    c1[i] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    // The activation stream comes from L2: fetch ~1 KiB ahead (measured +5 % at 1 thread).
    _mm_prefetch(reinterpret_cast<const char*>(xp + k * MR + 256), _MM_HINT_T0);
    const __m512 w0 = _mm512_load_ps(wp + k * kNr);
    const __m512 w1 = _mm512_load_ps(wp + k * kNr + 16);
    const float* xk = xp + k * MR;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 b = _mm512_set1_ps(xk[i]);
      c0[i] = _mm512_fmadd_ps(w0, b, c0[i]);
      c1[i] = _mm512_fmadd_ps(w1, b, c1[i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* yi = y + i * ldy;
    if (accumulate) {
      c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, yi));
      c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, yi + 16));
    }
    _mm512_mask_storeu_ps(yi, m0, c0[i]);
    _mm512_mask_storeu_ps(yi + 16, m1, c1[i]);
  }
}

using TileFn = void (*)(const float*, const float*, int64_t, float*, int64_t, __mmask16, __mmask16,
                        bool);

template <int... Rows>
constexpr auto make_tiles(std::integer_sequence<int, Rows...>) {
  return std::array<TileFn, sizeof...(Rows)>{&gemm_tile<Rows + 1>...};
}

// kTiles[r - 1]: the tile for r activation rows (1..kGemmMr).
constexpr auto kTiles = make_tiles(std::make_integer_sequence<int, kGemmMr>{});

// dense_gemm's sums for MR (< kGemmMr + 2) activation rows without packing the weights: the
// 16 weight rows [j0, j0 + 16) (rows past `live` neither read nor written) as 16 output lanes,
// each kc-deep column slice summed from zero by one fused multiply-add a column in column
// order and added to y after the first slice: per output the same operations in the same
// order as gemm_tile's, so a row's result does not depend on whether it ran here or there.
// Each 16-column block of the 16 rows is loaded row-wise and transposed in registers (the
// form for a matrix without its panels16 copy; 0.6x of the default decode).
template <int MR>
void rows_group(const WeightMatrix& w, const float* x, int64_t j0, int64_t live, float* y,
                int64_t ldy) {
  const int64_t cols = w.cols;
  const __mmask16 out_mask = lanes_mask(live);
  for (int64_t k0 = 0; k0 < cols; k0 += kKc) {
    const int64_t kc = std::min(kKc, cols - k0);
    __m512 c[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) c[i] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < kc; kb += 16) {
      const int64_t count = std::min<int64_t>(16, kc - kb);
      const __mmask16 col_mask = lanes_mask(count);
      __m512 r[16];
      for (int l = 0; l < 16; ++l) {
        r[l] = l < live ? load_weight16(w, j0 + l, k0 + kb, col_mask) : _mm512_setzero_ps();
      }
      transpose16(r);  // r[q], lane l: w[j0 + l][k0 + kb + q]
      const float* xk = x + k0 + kb;
      for (int64_t q = 0; q < count; ++q) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          c[i] = _mm512_fmadd_ps(r[q], _mm512_set1_ps(xk[i * cols + q]), c[i]);
        }
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* yi = y + i * ldy + j0;
      if (k0 > 0) c[i] = _mm512_add_ps(c[i], _mm512_maskz_loadu_ps(out_mask, yi));
      _mm512_mask_storeu_ps(yi, out_mask, c[i]);
    }
  }
}

// rows_group's sums from the panels16 copy (a group's column is one vector) for G groups of
// 16 rows at once (rows [j0, j0 + 16 G), `live` of them stored): each group's lanes run the
// same chain as in rows_group, G of them interleaved so the fused multiply-adds of one column
// do not wait on each other (one group at a time stalls on the FMA latency: decode ran
// 0.74-0.78x of the default, four 1.11-1.13x).
template <int MR, int G>
void panel_groups(const WeightMatrix& w, const float* x, int64_t j0, int64_t live, float* y,
                  int64_t ldy) {
  const int64_t cols = w.cols;
  const int64_t g0 = j0 / 16;
  for (int64_t k0 = 0; k0 < cols; k0 += kKc) {
    const int64_t kc = std::min(kKc, cols - k0);
    __m512 c[G][MR];
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) c[g][i] = _mm512_setzero_ps();
    }
    const float* xk = x + k0;
    for (int64_t q = 0; q < kc; ++q) {
      __m512 b[MR];
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) b[i] = _mm512_set1_ps(xk[i * cols + q]);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        const __m512 wq = load_group_column(w, g0 + g, k0 + q);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) c[g][i] = _mm512_fmadd_ps(wq, b[i], c[g][i]);
      }
    }
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      const __mmask16 out_mask = lanes_mask(live - 16 * g);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        float* yi = y + i * ldy + j0 + 16 * g;
        if (k0 > 0) c[g][i] = _mm512_add_ps(c[g][i], _mm512_maskz_loadu_ps(out_mask, yi));
        _mm512_mask_storeu_ps(yi, out_mask, c[g][i]);
      }
    }
  }
}

using RowsFn = void (*)(const WeightMatrix&, const float*, int64_t, int64_t, float*, int64_t);

template <int... Rows>
constexpr auto make_rows_groups(std::integer_sequence<int, Rows...>) {
  return std::array<RowsFn, sizeof...(Rows)>{&rows_group<Rows + 1>...};
}
template <int G, int... Rows>
constexpr auto make_panel_groups(std::integer_sequence<int, Rows...>) {
  return std::array<RowsFn, sizeof...(Rows)>{&panel_groups<Rows + 1, G>...};
}

// [m - 1]: the form for m activation rows. kRowsGroups and kPanelGroups take 1..kDenseRowsMax
// rows a group at a time; kPanelFours 1..4 rows four groups at a time (16 accumulators at most).
constexpr auto kRowsGroups = make_rows_groups(std::make_integer_sequence<int, kDenseRowsMax>{});
constexpr auto kPanelGroups =
    make_panel_groups<1>(std::make_integer_sequence<int, kDenseRowsMax>{});
constexpr auto kPanelFours = make_panel_groups<4>(std::make_integer_sequence<int, 4>{});

}  // namespace
#endif

bool dense_gemm_rows([[maybe_unused]] CpuContext& ctx, const WeightMatrix& w,
                     [[maybe_unused]] const float* x, int64_t m, [[maybe_unused]] float* y) {
  if (!dense_gemm_supported(w) || m > kDenseRowsMax) return false;
#ifdef HEARTH_CPU_AVX512
  const int64_t n = w.rows;
  if (m <= 0 || n <= 0) return true;
  if (w.cols == 0) {
    std::fill_n(y, m * n, 0.0f);
    return true;
  }
  const bool panels = w.panels16 != nullptr;
  const RowsFn one = panels ? kPanelGroups[m - 1] : kRowsGroups[m - 1];
  const RowsFn four = panels && m <= 4 ? kPanelFours[m - 1] : nullptr;
  ctx.pool.parallel_for(n, 64, [&](int64_t a, int64_t b) {
    int64_t j0 = a;
    if (four != nullptr) {
      for (; j0 + 64 <= b; j0 += 64) four(w, x, j0, 64, y, n);
    }
    for (; j0 < b; j0 += 16) one(w, x, j0, std::min<int64_t>(16, b - j0), y, n);
  });
  return true;
#else
  return false;
#endif
}

bool panels16_wanted(const WeightMatrix& w) { return dense_gemm_supported(w) && !w.quantized(); }

std::size_t panels16_bytes(const WeightMatrix& w) {
  return static_cast<std::size_t>((w.rows + 15) / 16 * 16 * w.cols) * dtype_size(w.dtype);
}

void interleave_panels16_blocks(const WeightMatrix& w, [[maybe_unused]] int64_t g0,
                                [[maybe_unused]] int64_t g1, [[maybe_unused]] void* dst) {
  HEARTH_CHECK(panels16_wanted(w), "a panels16 copy of a matrix no kernel reads it for");
#ifdef HEARTH_CPU_AVX512
  // 16 x 16 blocks through the registers: each row's 16 columns widened to 32-bit lanes (the
  // bits only moved), transposed, narrowed back: one 16-lane column a store.
  const bool wide = w.dtype == DType::kF32;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t live = std::min<int64_t>(16, w.rows - g * 16);
    for (int64_t c0 = 0; c0 < w.cols; c0 += 16) {
      const int64_t count = std::min<int64_t>(16, w.cols - c0);
      const __mmask16 mask = lanes_mask(count);
      __m512 v[16];
      for (int64_t l = 0; l < 16; ++l) {
        const int64_t at = (g * 16 + l) * w.cols + c0;
        if (l >= live) {
          v[l] = _mm512_setzero_ps();
        } else if (wide) {
          v[l] = _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w.data) + at);
        } else {
          v[l] = _mm512_castsi512_ps(_mm512_cvtepu16_epi32(
              _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w.data) + at)));
        }
      }
      transpose16(v);
      for (int64_t q = 0; q < count; ++q) {
        const int64_t at = (g * w.cols + c0 + q) * 16;
        if (wide) {
          _mm512_storeu_ps(static_cast<float*>(dst) + at, v[q]);
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(dst) + at),
                              _mm512_cvtepi32_epi16(_mm512_castps_si512(v[q])));
        }
      }
    }
  }
#endif
}

bool dense_gemm([[maybe_unused]] CpuContext& ctx, const WeightMatrix& w,
                [[maybe_unused]] const float* x, [[maybe_unused]] int64_t m,
                [[maybe_unused]] float* y) {
  if (!dense_gemm_supported(w) && !dense_gemm_quantized_supported(w)) return false;
#ifdef HEARTH_CPU_AVX512
  const int64_t cols = w.cols;
  const int64_t n = w.rows;
  if (m <= 0 || n <= 0) return true;
  if (cols == 0) {
    std::fill_n(y, m * n, 0.0f);
    return true;
  }
  const int64_t tiles = (m + kGemmMr - 1) / kGemmMr;
  // xp: [tiles][cols][rows of the tile], the activations packed once for every thread.
  thread_local AlignedFloats kept;
  AlignedFloats once;
  float* xp = (m * cols <= kKeepActivationFloats ? kept : once).get(m * cols);
  ctx.pool.parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t rows = std::min(kGemmMr, m - t * kGemmMr);
      pack_activations(x, cols, t * kGemmMr, rows, xp + t * kGemmMr * cols);
    }
  });
  // About two chunks of weight rows per thread (whole panels, at most kNc rows each).
  const int64_t threads = ctx.pool.size();
  const int64_t per_chunk = (n + 2 * threads - 1) / (2 * threads);
  const int64_t grain = std::clamp<int64_t>((per_chunk + kNr - 1) / kNr * kNr, kNr, kNc);
  ctx.pool.parallel_for(n, grain, [&](int64_t a, int64_t b) {
    thread_local AlignedFloats wp_buf;
    float* wp = wp_buf.get(kNc * kKc);
    for (int64_t n0 = a; n0 < b; n0 += kNc) {
      const int64_t n1 = std::min(b, n0 + kNc);
      for (int64_t k0 = 0; k0 < cols; k0 += kKc) {
        const int64_t kc = std::min(kKc, cols - k0);
        pack_weights(w, n0, n1, k0, kc, wp);
        for (int64_t tb = 0; tb < tiles; tb += kMcTiles) {
          const int64_t te = std::min(tiles, tb + kMcTiles);
          for (int64_t p0 = n0; p0 < n1; p0 += kNr) {
            const float* panel = wp + (p0 - n0) / kNr * kc * kNr;
            const __mmask16 m0 = lanes_mask(n1 - p0);
            const __mmask16 m1 = lanes_mask(n1 - p0 - 16);
            for (int64_t t = tb; t < te; ++t) {
              const int64_t rows = std::min(kGemmMr, m - t * kGemmMr);
              kTiles[rows - 1](xp + t * kGemmMr * cols + k0 * rows, panel, kc,
                               y + t * kGemmMr * n + p0, n, m0, m1, k0 > 0);
            }
          }
        }
      }
    }
  });
  return true;
#else
  return false;
#endif
}

}  // namespace hearth::kernels::cpu
