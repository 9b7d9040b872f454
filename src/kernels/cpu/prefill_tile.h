// Register-tiled prefill micro-kernel over an f32 weight panel: activations are transposed
// once per call so one vector holds 16 activation rows at one column, and each weight value
// is broadcast: 12 x 32 outputs in registers read under half the L2 bytes per FMA of the
// dot-product 4 x 4 tile (which streams four weight vectors per 16 FMAs).
#pragma once

#include <cstdint>

#include "kernels/cpu/matvec_rows.h"

namespace hearth::kernels::cpu {

#ifdef HEARTH_CPU_AVX512

// Activation rows per micro-tile (two vectors of 16; a last partial tile of up to 16 rows
// uses one).
inline constexpr int64_t kPanelActRows = 32;

// y[l * y_stride + j] (+)= w_row(j) · x_row(l) for R weight rows (row j at w + j * cols) and
// the kPanelActRows activation rows of xt, which holds x transposed: xt[k * xt_stride + l]
// ([cols, padded rows]); only rows l < valid are stored, added to y when `accumulate`.
template <int R, int V>
void panel_tile_avx512(const float* w, int64_t cols, const float* xt, int64_t xt_stride,
                       int64_t valid, bool accumulate, float* y, int64_t y_stride) {
  __m512 acc[R][V];
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) acc[j][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < cols; ++k) {
    __m512 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_ps(xt + k * xt_stride + 16 * v);
    for (int j = 0; j < R; ++j) {
      const __m512 wb = _mm512_set1_ps(w[j * cols + k]);
      for (int v = 0; v < V; ++v) acc[j][v] = _mm512_fmadd_ps(wb, xv[v], acc[j][v]);
    }
  }
  alignas(64) float lanes[kPanelActRows];
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) _mm512_store_ps(lanes + 16 * v, acc[j][v]);
    if (accumulate) {
      for (int64_t l = 0; l < valid; ++l) y[l * y_stride + j] += lanes[l];
    } else {
      for (int64_t l = 0; l < valid; ++l) y[l * y_stride + j] = lanes[l];
    }
  }
}

// Rows [0, rows) of an f32 panel ([rows, cols]) against 16 * V transposed activation rows:
// twelve weight rows per step (up to 24 accumulators), then 8, 4 and 1 for the rest.
template <int V>
void panel_rows_v_avx512(const float* panel, int64_t rows, int64_t cols, const float* xt,
                         int64_t xt_stride, int64_t valid, bool accumulate, float* y,
                         int64_t y_stride) {
  int64_t r = 0;
  for (; r + 12 <= rows; r += 12) {
    panel_tile_avx512<12, V>(panel + r * cols, cols, xt, xt_stride, valid, accumulate, y + r,
                             y_stride);
  }
  for (; r + 8 <= rows; r += 8) {
    panel_tile_avx512<8, V>(panel + r * cols, cols, xt, xt_stride, valid, accumulate, y + r,
                            y_stride);
  }
  for (; r + 4 <= rows; r += 4) {
    panel_tile_avx512<4, V>(panel + r * cols, cols, xt, xt_stride, valid, accumulate, y + r,
                            y_stride);
  }
  for (; r < rows; ++r) {
    panel_tile_avx512<1, V>(panel + r * cols, cols, xt, xt_stride, valid, accumulate, y + r,
                            y_stride);
  }
}

// panel_rows_v_avx512 with one vector of activation rows when valid <= 16, else two.
inline void panel_rows_avx512(const float* panel, int64_t rows, int64_t cols, const float* xt,
                              int64_t xt_stride, int64_t valid, bool accumulate, float* y,
                              int64_t y_stride) {
  if (valid <= 16) {
    panel_rows_v_avx512<1>(panel, rows, cols, xt, xt_stride, valid, accumulate, y, y_stride);
  } else {
    panel_rows_v_avx512<2>(panel, rows, cols, xt, xt_stride, valid, accumulate, y, y_stride);
  }
}

#endif  // HEARTH_CPU_AVX512

}  // namespace hearth::kernels::cpu
