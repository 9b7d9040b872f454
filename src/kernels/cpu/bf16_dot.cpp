// bf16 prefill GEMM for bf16 weights (see bf16_dot.h): activations rounded once to bf16 pairs
// laid out pair-major; weights read in place and broadcast pair by pair into a 12 x 32
// AVX512-BF16 `vdpbf16ps` register tile. (An AMX-BF16 route died with SIGILL on the GPU
// machine's Emerald Rapids VM at 2e0376d and cac0da3 and was removed; see RESULTS.md.)
// The AVX-512 intrinsics header first (kernels/cpu/intrinsics.h says why).
#include "kernels/cpu/intrinsics.h"

#include "kernels/cpu/bf16_dot.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define HEARTH_CPU_BF16DOT 1
#endif

namespace hearth::kernels::cpu {

bool bf16_dot_available() {
#ifdef HEARTH_CPU_BF16DOT
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool bf16_dot_supported(const WeightMatrix& w) {
  return w.dtype == DType::kBF16 && w.cols > 0 && bf16_dot_available();
}

#ifdef HEARTH_CPU_BF16DOT
namespace {

// Activation rows per micro-tile (two vectors of 16 lanes).
constexpr int64_t kActRows = 32;
// Weight rows per L2-resident block for the vector tiles (a multiple of 12).
constexpr int64_t kBlockRows = 48;

// xt[p * mp + i] = the bf16 pair (x[i][2p], x[i][2p + 1]) for the 16 rows at i0 (rounded
// to nearest even; zero for rows past m and columns past cols): column pairs major, so one
// vector holds a pair of 16 activation rows (the layout the vector tiles
// read). 16 x 16 pairs at a time: rows converted into a small block, columns gathered
// out of it, so every store to xt is a whole 64-byte vector.
void round_pairs_bf16(const float* x, int64_t cols, int64_t m, int64_t pairs, int64_t mp,
                      int64_t i0, uint32_t* xt) {
  alignas(64) uint32_t block[16 * 16];
  const __m512i column =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(16));
  for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
    const int64_t c = 2 * p0;
    const int64_t left = cols - c;
    const __mmask16 lo = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1u;
    const __mmask16 hi = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1u;
    for (int64_t i = 0; i < 16; ++i) {
      __m512i v = _mm512_setzero_si512();
      if (i0 + i < m) {
        const float* xr = x + (i0 + i) * cols + c;
        const __m512 a = _mm512_maskz_loadu_ps(lo, xr);
        const __m512 b = _mm512_maskz_loadu_ps(hi, xr + 16);
        v = (__m512i)_mm512_cvtne2ps_pbh(b, a);
      }
      _mm512_store_si512(block + 16 * i, v);
    }
    const int64_t nq = std::min<int64_t>(16, pairs - p0);
    for (int64_t q = 0; q < nq; ++q) {
      const __m512i idx = _mm512_add_epi32(column, _mm512_set1_epi32(static_cast<int>(q)));
      _mm512_storeu_si512(xt + (p0 + q) * mp + i0, _mm512_i32gather_epi32(idx, block, 4));
    }
  }
}

// y[l * n + j] = w_row(j) · x_row(l) for R weight rows (row j at w + j * cols, read in
// place: each bf16 pair is broadcast) and 16 * V activation rows of xt (lanes), only rows
// l < valid stored. vdpbf16ps: 32 products per instruction, no horizontal sums.
template <int R, int V>
void vec_tile(const uint16_t* w, int64_t cols, const uint32_t* xt, int64_t mp, int64_t valid,
              float* y, int64_t n) {
  __m512 acc[R][V];
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) acc[j][v] = _mm512_setzero_ps();
  }
  const int64_t whole = cols / 2;
  for (int64_t p = 0; p < whole; ++p) {
    __m512bh xv[V];
    for (int v = 0; v < V; ++v) xv[v] = (__m512bh)_mm512_loadu_si512(xt + p * mp + 16 * v);
    for (int j = 0; j < R; ++j) {
      uint32_t pair;
      std::memcpy(&pair, w + j * cols + 2 * p, sizeof(pair));
      const __m512bh wb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      for (int v = 0; v < V; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], xv[v], wb);
    }
  }
  if (cols % 2 != 0) {  // the last column alone (its pair's upper half is zero in xt too)
    __m512bh xv[V];
    for (int v = 0; v < V; ++v) xv[v] = (__m512bh)_mm512_loadu_si512(xt + whole * mp + 16 * v);
    for (int j = 0; j < R; ++j) {
      const __m512bh wb = (__m512bh)_mm512_set1_epi32(w[j * cols + cols - 1]);
      for (int v = 0; v < V; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], xv[v], wb);
    }
  }
  alignas(64) float lanes[16 * V];
  for (int j = 0; j < R; ++j) {
    for (int v = 0; v < V; ++v) _mm512_store_ps(lanes + 16 * v, acc[j][v]);
    for (int64_t l = 0; l < valid; ++l) y[l * n + j] = lanes[l];
  }
}

// Weight rows [0, rows) at w against up to 32 activation rows of xt: 12 weight rows per step,
// then 8, 4 and 1.
template <int V>
void vec_rows(const uint16_t* w, int64_t rows, int64_t cols, const uint32_t* xt, int64_t mp,
              int64_t valid, float* y, int64_t n) {
  int64_t r = 0;
  for (; r + 12 <= rows; r += 12) vec_tile<12, V>(w + r * cols, cols, xt, mp, valid, y + r, n);
  for (; r + 8 <= rows; r += 8) vec_tile<8, V>(w + r * cols, cols, xt, mp, valid, y + r, n);
  for (; r + 4 <= rows; r += 4) vec_tile<4, V>(w + r * cols, cols, xt, mp, valid, y + r, n);
  for (; r < rows; ++r) vec_tile<1, V>(w + r * cols, cols, xt, mp, valid, y + r, n);
}

void vec_block(const uint16_t* w, int64_t rows, int64_t cols, const uint32_t* xt, int64_t mp,
               int64_t valid, float* y, int64_t n) {
  if (valid <= 16) {
    vec_rows<1>(w, rows, cols, xt, mp, valid, y, n);
  } else {
    vec_rows<2>(w, rows, cols, xt, mp, valid, y, n);
  }
}

}  // namespace
#endif

const char* bf16_dot_kernel_name() {
#ifdef HEARTH_CPU_BF16DOT
  if (!bf16_dot_available()) return "none";
  return "avx512-bf16 vdpbf16ps panels";
#else
  return "none";
#endif
}

bool bf16_linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  if (!bf16_dot_supported(w)) return false;
#ifdef HEARTH_CPU_BF16DOT
  const int64_t cols = w.cols;
  const int64_t n = w.rows;
  const int64_t pairs = (cols + 1) / 2;
  const int64_t mp = (m + kActRows - 1) / kActRows * kActRows;
  // xt: [pairs, mp] bf16 pairs of the activations (zero rows past m), rounded once for every
  // weight row.
  std::vector<uint32_t> xt(static_cast<std::size_t>(pairs * mp));
  const int64_t row_blocks = mp / 16;
  if (m * cols < (1 << 15)) {
    for (int64_t ib = 0; ib < row_blocks; ++ib) {
      round_pairs_bf16(x, cols, m, pairs, mp, ib * 16, xt.data());
    }
  } else {
    ctx.pool.parallel_for(row_blocks, 1, [&](int64_t a, int64_t b) {
      for (int64_t ib = a; ib < b; ++ib)
        round_pairs_bf16(x, cols, m, pairs, mp, ib * 16, xt.data());
    });
  }
  const auto* wd = static_cast<const uint16_t*>(w.data);
  ctx.pool.parallel_for(n, kBlockRows, [&](int64_t a, int64_t b) {
    // A block of weight rows stays in L2 while every activation tile passes.
    for (int64_t r0 = a; r0 < b; r0 += kBlockRows) {
      const int64_t r1 = std::min(b, r0 + kBlockRows);
      for (int64_t i0 = 0; i0 < m; i0 += kActRows) {
        const int64_t valid = std::min(kActRows, m - i0);
        vec_block(wd + r0 * cols, r1 - r0, cols, xt.data() + i0, mp, valid, y + i0 * n + r0, n);
      }
    }
  });
  return true;
#else
  (void)ctx;
  (void)x;
  (void)m;
  (void)y;
  return false;
#endif
}

}  // namespace hearth::kernels::cpu
