// bf16 prefill GEMM for bf16 weights (see bf16_dot.h): activations rounded once to bf16 pairs
// laid out pair-major; weights read in place, either as AMX tiles (`tdpbf16ps`, 32 x 32 per
// block) or broadcast pair by pair into a 12 x 32 AVX512-BF16 `vdpbf16ps` register tile.
// The AVX-512 intrinsics header first (kernels/cpu/intrinsics.h says why).
#include "kernels/cpu/intrinsics.h"

#include "kernels/cpu/bf16_dot.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

// Activation rows per micro-tile (two vectors of 16 lanes) and per AMX block.
constexpr int64_t kActRows = 32;
// Weight rows per L2-resident block for the vector tiles (a multiple of 12).
constexpr int64_t kBlockRows = 48;
// AMX: weight rows per block fill about this many bytes of L2 (256 rows at 2048 columns, 64
// at 8192), so the activations are re-read from L3 once per block rather than per 32 rows.
constexpr int64_t kAmxBlockBytes = 1 << 20;
// AMX: columns per pass (partial sums add into y), so a block of 2048-column weight rows and
// the activations' matching slice stay in L2 for wide inputs (the 8192-column down projection).
constexpr int64_t kAmxDepth = 2048;

// xt[p * mp + i] = the bf16 pair (x[i][2p], x[i][2p + 1]) for the 16 rows at i0 (rounded
// to nearest even; zero for rows past m and columns past cols): column pairs major, so one
// vector holds a pair of 16 activation rows (the layout both the vector tiles and AMX's B
// tiles read). 16 x 16 pairs at a time: rows converted into a small block, columns gathered
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

// AMX-BF16 (Sapphire/Emerald Rapids): a 32 x 32 output block in four 16 x 16 f32 tiles,
// weights as A tiles read in place ([16 rows, 32 bf16], row stride cols), activations as B
// tiles of xt ([16 pairs, 16 rows x 2]: the pair-interleaved layout TDPBF16PS takes). Used
// where the CPU has AMX and Linux grants the tile state.
bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 22)) != 0 && (d & (1u << 24)) != 0;  // AMX-BF16, AMX-TILE
}

bool amx_probe_in_child();

// Asks Linux for the AMX tile data state (once per process), checks that it was granted, and
// runs the tile instructions once in a forked child (a SIGILL there, as the GPU machine's VM
// gave at 2e0376d, means no AMX here); false on any failure: the AVX512-BF16 path runs.
bool amx_permitted() {
  static const bool ok = [] {
    // Off: on the GPU machine's Emerald Rapids VM every --cpu-bf16-dot run died with SIGILL
    // at 2e0376d and again at cac0da3 (with the permission request and the child probe), and
    // no AMX machine is at hand to find out why. The AVX512-BF16 path runs instead.
    constexpr bool kAmxEnabled = false;
    if (!kAmxEnabled || !cpu_has_amx_bf16()) return false;
    constexpr long kArchGetXcompPerm = 0x1022;
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
    unsigned long long perm = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0) return false;
    if ((perm & (1ull << kXfeatureXtiledata)) == 0) return false;
    return amx_probe_in_child();
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

// The instructions amx_block uses, on zeros.
__attribute__((target("amx-tile,amx-bf16"))) void amx_probe() {
  alignas(64) uint16_t a[16 * 32] = {};
  alignas(64) float c[16 * 16];
  amx_configure();
  _tile_zero(0);
  _tile_loadd(4, a, 64);
  _tile_loadd(6, a, 64);
  _tile_dpbf16ps(0, 4, 6);
  _tile_stored(0, c, 64);
  amx_release();
}

bool amx_probe_in_child() {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    amx_probe();
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// y[i * n + j] (+)= w_row(j) · x_row(i) over klen columns (a multiple of 32) for 32 weight rows
// at w (row stride ws) and the 32 activation rows of xt (pair-row stride mp); only rows
// i < valid written, added to y when `accumulate`.
__attribute__((target("amx-tile,amx-bf16"))) void amx_block(const uint16_t* w, int64_t ws,
                                                            int64_t klen, const uint32_t* xt,
                                                            int64_t mp, int64_t valid,
                                                            bool accumulate, float* y, int64_t n) {
  alignas(64) float c[4][16 * 16];  // [weight half * 2 + activation half][16 w rows][16 acts]
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t wb = ws * 2;  // bytes per weight row
  const int64_t xs = mp * 4;  // bytes per pair row of xt
  for (int64_t k = 0; k < klen; k += 32) {
    _tile_loadd(4, w + k, wb);
    _tile_loadd(5, w + 16 * ws + k, wb);
    _tile_loadd(6, xt + k / 2 * mp, xs);
    _tile_loadd(7, xt + k / 2 * mp + 16, xs);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  // Output row i is column i % 16 of two tiles: one gather per 16 weight rows.
  const __m512i column =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(16));
  for (int64_t i = 0; i < valid; ++i) {
    const int ih = i < 16 ? 0 : 1;
    const __m512i idx = _mm512_add_epi32(column, _mm512_set1_epi32(static_cast<int>(i % 16)));
    float* yr = y + i * n;
    __m512 lo = _mm512_i32gather_ps(idx, c[ih], 4);
    __m512 hi = _mm512_i32gather_ps(idx, c[2 + ih], 4);
    if (accumulate) {
      lo = _mm512_add_ps(lo, _mm512_loadu_ps(yr));
      hi = _mm512_add_ps(hi, _mm512_loadu_ps(yr + 16));
    }
    _mm512_storeu_ps(yr, lo);
    _mm512_storeu_ps(yr + 16, hi);
  }
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
  const int64_t cols = w.cols;
  const int64_t n = w.rows;
  const bool amx = amx_permitted() && cols % 32 == 0;
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
  const int64_t depth = amx ? std::min(cols, kAmxDepth) : cols;
  const int64_t block =
      amx ? std::clamp<int64_t>(kAmxBlockBytes / (depth * 2) / 32 * 32, 32, 256) : kBlockRows;
  ctx.pool.parallel_for(n, amx ? 32 : kBlockRows, [&](int64_t a, int64_t b) {
    if (amx) amx_configure();
    for (int64_t c0 = 0; c0 < cols; c0 += depth) {
      const int64_t klen = std::min(depth, cols - c0);
      // A block of weight rows stays in L2 while every activation tile passes.
      for (int64_t r0 = a; r0 < b; r0 += block) {
        const int64_t r1 = std::min(b, r0 + block);
        for (int64_t i0 = 0; i0 < m; i0 += kActRows) {
          const int64_t valid = std::min(kActRows, m - i0);
          int64_t r = r0;
          if (amx) {
            for (; r + 32 <= r1; r += 32) {
              amx_block(wd + r * cols + c0, cols, klen, xt.data() + c0 / 2 * mp + i0, mp, valid,
                        c0 > 0, y + i0 * n + r, n);
            }
          }
          // Rows short of an AMX block (all rows without AMX) over every column at once.
          if (c0 == 0) {
            vec_block(wd + r * cols, r1 - r, cols, xt.data() + i0, mp, valid, y + i0 * n + r, n);
          }
        }
      }
    }
    if (amx) amx_release();
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
