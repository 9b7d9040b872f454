// AVX512-BF16 prefill GEMM for bf16 weights (see bf16_dot.h): activations rounded to bf16
// pairs once, 32 weight rows packed pair-interleaved per panel, and a 12 x 32 register tile
// of `vdpbf16ps` on broadcast activation pairs whose lanes are output columns (no reductions).
// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics as
// (maybe-)uninitialized (a known false positive); the pragma must precede <immintrin.h>.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/bf16_dot.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

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

// Weight rows per packed panel: two vectors of 16 lanes.
constexpr int64_t kPanelRows = 32;
// Activation rows per micro-tile: 12 x 2 accumulators.
constexpr int64_t kTileAct = 12;

// xt[p * mp + i] = the bf16 pair (x[i][2p], x[i][2p + 1]) for rows [i0, i1) (rounded to
// nearest even), zero past cols; a column-pair-major layout so a micro-tile's broadcasts
// are contiguous.
void round_pairs_bf16(const float* x, int64_t cols, int64_t pairs, int64_t mp, int64_t i0,
                      int64_t i1, uint32_t* xt) {
  alignas(64) uint32_t tmp[16];
  for (int64_t i = i0; i < i1; ++i) {
    const float* xr = x + i * cols;
    for (int64_t c = 0; c < 2 * pairs; c += 32) {
      const int64_t left = cols - c;
      const __mmask16 lo = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1u;
      const __mmask16 hi = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1u;
      const __m512 a = _mm512_maskz_loadu_ps(lo, xr + c);
      const __m512 b = _mm512_maskz_loadu_ps(hi, xr + c + 16);
      _mm512_store_si512(tmp, (__m512i)_mm512_cvtne2ps_pbh(b, a));
      const int64_t p0 = c / 2;
      const int64_t n = std::min<int64_t>(16, pairs - p0);
      for (int64_t q = 0; q < n; ++q) xt[(p0 + q) * mp + i] = tmp[q];
    }
  }
}

// panel[p * 32 + j] = the bf16 pair (w[r0 + j][2p], w[r0 + j][2p + 1]) for rows [r0, r1),
// zero for rows past r1 and columns past cols (pairs may exceed (cols + 1) / 2).
void pack_panel(const uint16_t* w, int64_t cols, int64_t pairs, int64_t r0, int64_t r1,
                uint32_t* panel) {
  const int64_t rows = r1 - r0;
  for (int64_t j = 0; j < kPanelRows; ++j) {
    if (j >= rows) {
      for (int64_t p = 0; p < pairs; ++p) panel[p * kPanelRows + j] = 0;
      continue;
    }
    const uint16_t* wr = w + (r0 + j) * cols;
    const int64_t whole = cols / 2;
    for (int64_t p = 0; p < whole; ++p) {
      uint32_t v;
      std::memcpy(&v, wr + 2 * p, sizeof(v));
      panel[p * kPanelRows + j] = v;
    }
    int64_t p = whole;
    if (cols % 2 != 0) panel[p++ * kPanelRows + j] = wr[cols - 1];
    for (; p < pairs; ++p) panel[p * kPanelRows + j] = 0;
  }
}

// y[(i0 + i) * n + r0 + j] = Σ_p panel pair j · xt pair i for the kTileAct activation rows
// at i0 (only i < valid stored) and the panel's rows j < rows.
void panel_tile(const uint32_t* panel, int64_t pairs, const uint32_t* xt, int64_t mp, int64_t valid,
                int64_t rows, float* y, int64_t n) {
  __m512 acc[kTileAct][2];
  for (int i = 0; i < kTileAct; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh w0 = (__m512bh)_mm512_load_si512(panel + p * kPanelRows);
    const __m512bh w1 = (__m512bh)_mm512_load_si512(panel + p * kPanelRows + 16);
    const uint32_t* xp = xt + p * mp;
    for (int i = 0; i < kTileAct; ++i) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, xv);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w1, xv);
    }
  }
  const __mmask16 m0 = rows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << rows) - 1u);
  const __mmask16 m1 = rows >= 32   ? 0xFFFF
                       : rows <= 16 ? 0
                                    : static_cast<__mmask16>((1u << (rows - 16)) - 1u);
  for (int64_t i = 0; i < valid; ++i) {
    _mm512_mask_storeu_ps(y + i * n, m0, acc[i][0]);
    _mm512_mask_storeu_ps(y + i * n + 16, m1, acc[i][1]);
  }
}

// AMX-BF16 (Sapphire/Emerald Rapids): 32 x 32 output blocks in four 16 x 16 f32 tiles,
// activations as two [16 rows, 32 bf16] A tiles of the row-major bf16 copy, weights as two
// [16 pairs, 16 rows x 2] B tiles of the packed panel (its pair-interleaved layout is the
// one TDPBF16PS takes). Used where the CPU has AMX and the kernel grants the tile state.
constexpr int64_t kAmxRows = 32;

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 22)) != 0 && (d & (1u << 24)) != 0;  // AMX-BF16, AMX-TILE
}

// Asks Linux for the AMX tile data state (once per process); false when refused.
bool amx_permitted() {
  static const bool ok = [] {
    if (!cpu_has_amx_bf16()) return false;
    constexpr int kArchReqXcompPerm = 0x1023;
    constexpr int kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) void amx_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile,amx-bf16"))) void amx_release() { _tile_release(); }

// y[(i0 + i) * n + r0 + j] for i < valid (of 32 rows at xb, [32, kp] bf16) and j < rows (of
// the panel's 32), summed over kp / 2 pairs.
__attribute__((target("amx-tile,amx-bf16"))) void amx_block(const uint32_t* panel,
                                                            const uint16_t* xb, int64_t kp,
                                                            int64_t valid, int64_t rows, float* y,
                                                            int64_t n) {
  alignas(64) float c[4][16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t xs = kp * 2;  // bytes per activation row
  for (int64_t k = 0; k < kp; k += 32) {
    _tile_loadd(4, xb + k, xs);
    _tile_loadd(5, xb + 16 * kp + k, xs);
    _tile_loadd(6, panel + k / 2 * kPanelRows, kPanelRows * 4);
    _tile_loadd(7, panel + k / 2 * kPanelRows + 16, kPanelRows * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  for (int64_t i = 0; i < valid; ++i) {
    const float* lo = c[i < 16 ? 0 : 2] + (i % 16) * 16;
    const float* hi = c[i < 16 ? 1 : 3] + (i % 16) * 16;
    float* yr = y + i * n;
    for (int64_t j = 0; j < rows && j < 16; ++j) yr[j] = lo[j];
    for (int64_t j = 16; j < rows; ++j) yr[j] = hi[j - 16];
  }
}

// xb[i * kp + c] = bf16(x[i * cols + c]) for rows [i0, i1), zeros in columns [cols, kp).
void round_rows_bf16(const float* x, int64_t cols, int64_t kp, int64_t i0, int64_t i1,
                     uint16_t* xb) {
  for (int64_t i = i0; i < i1; ++i) {
    const float* xr = x + i * cols;
    uint16_t* o = xb + i * kp;
    for (int64_t c = 0; c < kp; c += 32) {
      const int64_t left = cols - c;
      const __mmask16 lo = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1u;
      const __mmask16 hi = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1u;
      const __m512 a = _mm512_maskz_loadu_ps(lo, xr + c);
      const __m512 b = _mm512_maskz_loadu_ps(hi, xr + c + 16);
      _mm512_storeu_si512(o + c, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
  }
}

// The AMX GEMM: weight panels padded to whole 16-pair K steps, activations to 32-row blocks.
void amx_linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  const int64_t cols = w.cols;
  const int64_t n = w.rows;
  const int64_t kp = (cols + 31) / 32 * 32;
  const int64_t mp = (m + kAmxRows - 1) / kAmxRows * kAmxRows;
  // xb: [mp, kp] bf16 activations, zero-padded.
  std::vector<uint16_t> xb(static_cast<std::size_t>(mp * kp), 0);
  ctx.pool.parallel_for(
      m, 1, [&](int64_t a, int64_t b) { round_rows_bf16(x, cols, kp, a, b, xb.data()); });
  const auto* wd = static_cast<const uint16_t*>(w.data);
  const int64_t pairs = kp / 2;
  ctx.pool.parallel_for(n, kPanelRows, [&](int64_t a, int64_t b) {
    thread_local std::vector<uint32_t> storage;
    storage.resize(static_cast<std::size_t>(pairs * kPanelRows + 16));
    uint32_t* panel =
        storage.data() + ((64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64) / 4;
    amx_configure();
    for (int64_t r0 = a; r0 < b; r0 += kPanelRows) {
      const int64_t r1 = std::min(b, r0 + kPanelRows);
      pack_panel(wd, cols, pairs, r0, r1, panel);
      for (int64_t i0 = 0; i0 < m; i0 += kAmxRows) {
        amx_block(panel, xb.data() + i0 * kp, kp, std::min(kAmxRows, m - i0), r1 - r0,
                  y + i0 * n + r0, n);
      }
    }
    amx_release();
  });
}

}  // namespace
#endif

const char* bf16_dot_kernel_name() {
#ifdef HEARTH_CPU_BF16DOT
  if (!bf16_dot_available()) return "none";
  return amx_permitted() ? "amx-bf16 tiles" : "avx512-bf16 vdpbf16ps panels";
#else
  return "none";
#endif
}

bool bf16_linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y) {
  if (!bf16_dot_supported(w)) return false;
#ifdef HEARTH_CPU_BF16DOT
  if (amx_permitted()) {
    amx_linear(ctx, w, x, m, y);
    return true;
  }
  const int64_t cols = w.cols;
  const int64_t n = w.rows;
  const int64_t pairs = (cols + 1) / 2;
  const int64_t mp = (m + kTileAct - 1) / kTileAct * kTileAct;
  // xt: [pairs, mp] bf16 pairs of the activations, rounded once for every weight row.
  std::vector<uint32_t> xt(static_cast<std::size_t>(pairs * mp), 0u);
  if (m * cols < (1 << 15)) {
    round_pairs_bf16(x, cols, pairs, mp, 0, m, xt.data());
  } else {
    ctx.pool.parallel_for(
        m, 1, [&](int64_t a, int64_t b) { round_pairs_bf16(x, cols, pairs, mp, a, b, xt.data()); });
  }
  const auto* wd = static_cast<const uint16_t*>(w.data);
  ctx.pool.parallel_for(n, kPanelRows, [&](int64_t a, int64_t b) {
    // [pairs, 32] packed weight rows, reused across calls; stays in L2 while every
    // activation tile passes.
    thread_local std::vector<uint32_t> storage;
    storage.resize(static_cast<std::size_t>(pairs * kPanelRows + 16));
    // 64-byte aligned start (aligned vector loads).
    uint32_t* panel =
        storage.data() + ((64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64) / 4;
    for (int64_t r0 = a; r0 < b; r0 += kPanelRows) {
      const int64_t r1 = std::min(b, r0 + kPanelRows);
      pack_panel(wd, cols, pairs, r0, r1, panel);
      for (int64_t i0 = 0; i0 < m; i0 += kTileAct) {
        panel_tile(panel, pairs, xt.data() + i0, mp, std::min(kTileAct, m - i0), r1 - r0,
                   y + i0 * n + r0, n);
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
