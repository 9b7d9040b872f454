// CPU lab for issue 4 (8-bit g64 decode at 2 threads on the GPU machine's CPU): one decode
// token's quantized linears of the Llama-3.2-1B shape (16 layers of q/k/v/o/gate/up/down plus
// the tied 128256 x 2048 head, 1.31 GB of codes, scales and biases; random values, 4 KiB pages
// like the file mapping) through the shipped int8 mat-vec (kernels/cpu/int8_dot.cpp) on 1 and 2
// threads (pinned to CPUs 0 and 1 as `taskset -c 0,1`), against a pure read of the same bytes
// (the per-core ceiling) and kernel variants of the shipped form (and the pre-lean one, with its
// separate factor pass): prefetch distance and hint, rows per step, work split. Every variant is
// checked against the shipped kernel before it is timed. CPU only; it lives with the CUDA labs
// because the device windows build and run those.
#include "kernels/cpu/int8_dot.cpp"
#include "kernels/cpu/thread_pool.cpp"

#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

// The lab links no BLAS: the two OpenBLAS calls CpuContext makes.
extern "C" {
void openblas_set_num_threads(int) {}
char* openblas_get_corename(void) {
  static char name[] = "none";
  return name;
}
}

#ifdef HEARTH_CPU_VNNI  // (int8_dot.cpp's: an AVX512-VNNI + VBMI build)
namespace hearth::kernels::cpu {
namespace {

struct Knobs {
  bool lean = true;            // the shipped form (dot_rows8_m1); false: the pre-lean form
  int rows = 4;                // weight rows per step
  int64_t pf = 8192;           // lean: bytes of reading ahead; pre-lean: distance in each row
  int hint = 0;                // 0: T0, 1: T1, 2: T2
  int64_t pf2 = 0;             // a second prefetch (T2) this far ahead, 0: none
  int64_t chunk_rows = 0;      // 0: parallel_for's chunks; else claims of this many rows
  bool side_prefetch = false;  // scales / biases prefetched 16 rows ahead
};

inline void prefetch(const uint8_t* p, int hint) {
  if (hint == 0) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  } else if (hint == 1) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T2);
  }
}

// The shipped batch-1 form (dot_rows8_m1) with knobs: R rows side by side, each prefetching
// pf / R bytes ahead in its own row and on into its row of the next steps.
inline int64_t stream_offset(int64_t c, int64_t cols, int64_t per_row, int R) {
  const int64_t p = c + per_row;
  return p < cols ? per_row : (p / cols) * R * cols + p % cols - c;
}

template <int R>
void lab_lean_rows(const WeightMatrix& w, int64_t r, const int8_t* xq, const float* d,
                   const float* sums, float* cs, float* y, const Knobs& k) {
  const int64_t cols = w.cols;
  const int group = w.group_size;
  const int64_t groups = cols / group;
  const uint8_t* q = static_cast<const uint8_t*>(w.data) + r * cols;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; g += 16) {
    const __mmask16 m = lanes_mask(groups - g);
    const __m512 dv = _mm512_maskz_loadu_ps(m, d + g);
    const __m512 sv = _mm512_maskz_loadu_ps(m, sums + g);
    for (int j = 0; j < R; ++j) {
      const int64_t at = (r + j) * groups + g;
      const __m512 s = load_side16(w.scales, w.scale_dtype, at, m);
      _mm512_mask_storeu_ps(cs + j * groups + g, m, _mm512_mul_ps(s, dv));
      acc[j] = _mm512_fmadd_ps(load_side16(w.biases, w.scale_dtype, at, m), sv, acc[j]);
    }
  }
  const int64_t near = k.pf / R, far = k.pf2 / R;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dp[R];
    for (int j = 0; j < R; ++j) dp[j] = _mm512_setzero_si512();
    for (int64_t c = g * group; c < (g + 1) * group; c += 64) {
      const int64_t a = k.pf ? stream_offset(c, cols, near, R) : 0;
      const int64_t f = k.pf2 ? stream_offset(c, cols, far, R) : 0;
      const __m512i xv = _mm512_loadu_si512(xq + c);
      for (int j = 0; j < R; ++j) {
        if (k.pf) prefetch(q + j * cols + c + a, k.hint);
        if (k.pf2) prefetch(q + j * cols + c + f, 2);
        dp[j] = dpbusd(dp[j], _mm512_loadu_si512(q + j * cols + c), xv);
      }
    }
    for (int j = 0; j < R; ++j) {
      acc[j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp[j]), _mm512_set1_ps(cs[j * groups + g]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j] = _mm512_reduce_add_ps(acc[j]);
}

// 8-bit, group a multiple of 64, one activation row: R rows per step (the pre-lean form).
template <int R>
void lab_dot_rows(const uint8_t* q, int64_t row_bytes, int64_t cols, int group, const int8_t* xq,
                  const float* cs, const float* bt, float* y, const Knobs& k) {
  const int64_t groups = cols / group;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dp[R];
    for (int j = 0; j < R; ++j) dp[j] = _mm512_setzero_si512();
    for (int64_t c = g * group; c < (g + 1) * group; c += 64) {
      const __m512i xv = _mm512_loadu_si512(xq + c);
      for (int j = 0; j < R; ++j) {
        if (k.pf) prefetch(q + j * row_bytes + c + k.pf, k.hint);
        if (k.pf2) prefetch(q + j * row_bytes + c + k.pf2, 1);
        dp[j] = dpbusd(dp[j], _mm512_loadu_si512(q + j * row_bytes + c), xv);
      }
    }
    for (int j = 0; j < R; ++j) {
      acc[j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp[j]), _mm512_set1_ps(cs[j * groups + g]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j] = _mm512_reduce_add_ps(acc[j]) + bt[j];
}

template <int R>
void lab_range(const WeightMatrix& w, const int8_t* xq, const float* d, const float* sums,
               int64_t r0, int64_t r1, float* y, const Knobs& k) {
  const int64_t groups = w.cols / w.group_size;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  thread_local std::vector<float> cs;
  cs.resize(static_cast<std::size_t>(R * groups));
  if (k.lean) {
    int64_t r = r0;
    for (; r + R <= r1; r += R) lab_lean_rows<R>(w, r, xq, d, sums, cs.data(), y + r, k);
    for (; r < r1; ++r) lab_lean_rows<1>(w, r, xq, d, sums, cs.data(), y + r, k);
    return;
  }
  float bt[R], out[R];
  for (int64_t r = r0; r < r1;) {
    const int rows = r + R <= r1 ? R : 1;
    if (k.side_prefetch && r + 16 + rows <= w.rows) {
      const int64_t side = groups * 2;  // bf16
      for (int64_t o = 0; o < rows * side; o += 64) {
        prefetch(static_cast<const uint8_t*>(w.scales) + (r + 16) * side + o, 0);
        prefetch(static_cast<const uint8_t*>(w.biases) + (r + 16) * side + o, 0);
      }
    }
    row_factors(w, r, rows, 1, d, sums, cs.data(), bt);
    if (rows == R) {
      lab_dot_rows<R>(bytes + r * w.cols, w.cols, w.cols, w.group_size, xq, cs.data(), bt, out, k);
    } else {
      lab_dot_rows<1>(bytes + r * w.cols, w.cols, w.cols, w.group_size, xq, cs.data(), bt, out, k);
    }
    for (int j = 0; j < rows; ++j) y[r + j] = out[j];
    r += rows;
  }
}

// Pure read of rows [r0, r1): R rows interleaved, prefetched like the kernel.
void read_range(const WeightMatrix& w, int64_t r0, int64_t r1, float* y, const Knobs& k) {
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  __m512i acc = _mm512_setzero_si512();
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint8_t* q = bytes + r * w.cols;
    for (int64_t c = 0; c < w.cols; c += 64) {
      for (int j = 0; j < 4; ++j) {
        if (k.pf) prefetch(q + j * w.cols + c + k.pf, k.hint);
        acc = _mm512_xor_si512(acc, _mm512_loadu_si512(q + j * w.cols + c));
      }
    }
  }
  y[r0] = static_cast<float>(_mm512_reduce_add_epi32(acc));
}

struct Mat {
  WeightMatrix w;
  int kind;  // 0 qkv, 1 o, 2 gate/up, 3 down, 4 head
};
const char* kKinds[] = {"qkv", "o", "gate/up", "down", "head"};

struct Activations {
  std::vector<float> x;
  // Per column count (2048 / 8192): quantized row, scales, sums.
  std::vector<int8_t> q2, q8;
  std::vector<float> d2, s2, d8, s8;
};

using Run = std::function<void(CpuContext&, const Mat&, float*)>;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double total_ms = 0;
  double kind_ms[5] = {};
};

Timing time_token(CpuContext& ctx, const std::vector<Mat>& mats, const Run& run, float* y,
                  int reps) {
  std::vector<Timing> all;
  for (int rep = 0; rep < reps + 1; ++rep) {
    Timing t;
    const double t0 = now_s();
    for (const Mat& m : mats) {
      const double a = now_s();
      run(ctx, m, y);
      t.kind_ms[m.kind] += (now_s() - a) * 1e3;
    }
    t.total_ms = (now_s() - t0) * 1e3;
    if (rep > 0) all.push_back(t);  // the first is a warm-up
  }
  std::sort(all.begin(), all.end(),
            [](const Timing& a, const Timing& b) { return a.total_ms < b.total_ms; });
  return all[all.size() / 2];
}

int lab_main() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  CPU_SET(1, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) std::printf("(affinity 0,1 not set)\n");
  if (!int8_dot_available()) {
    std::printf("lab_int8_decode_cpu: no AVX512-VNNI here, skipped\n");
    return 0;
  }
  // Layout: per layer q, k, v, o, gate, up, down, then the head; codes then sides.
  struct Shape {
    int64_t rows, cols;
    int kind;
  };
  std::vector<Shape> shapes;
  for (int l = 0; l < 16; ++l) {
    shapes.push_back({2048, 2048, 0});
    shapes.push_back({512, 2048, 0});
    shapes.push_back({512, 2048, 0});
    shapes.push_back({2048, 2048, 1});
    shapes.push_back({8192, 2048, 2});
    shapes.push_back({8192, 2048, 2});
    shapes.push_back({2048, 8192, 3});
  }
  shapes.push_back({128256, 2048, 4});
  std::size_t total = 0;
  for (const Shape& s : shapes) total += s.rows * s.cols + 2 * s.rows * (s.cols / 64) * 2 + 4096;
  double kind_bytes[5] = {};
  for (const Shape& s : shapes) kind_bytes[s.kind] += s.rows * s.cols + 4.0 * s.rows * s.cols / 64;
  auto alloc = [&](bool huge) {
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return static_cast<uint8_t*>(nullptr);
    madvise(p, total, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    return static_cast<uint8_t*>(p);
  };
  auto fill = [&](uint8_t* base, std::vector<Mat>& mats) {
    uint64_t state = 0x9e3779b97f4a7c15ull;
    std::size_t at = 0;
    for (const Shape& s : shapes) {
      Mat m;
      m.kind = s.kind;
      m.w.dtype = DType::kU32;
      m.w.rows = s.rows;
      m.w.cols = s.cols;
      m.w.bits = 8;
      m.w.group_size = 64;
      m.w.scale_dtype = DType::kBF16;
      uint8_t* codes = base + at;
      const int64_t n = s.rows * s.cols;
      for (int64_t i = 0; i < n; i += 8) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        std::memcpy(codes + i, &state, 8);
      }
      at += n;
      const int64_t sides = s.rows * (s.cols / 64);
      auto* sc = reinterpret_cast<uint16_t*>(base + at);
      auto* bi = sc + sides;
      for (int64_t i = 0; i < sides; ++i) {
        sc[i] = 0x3c23;  // bf16 ~0.00995
        bi[i] = 0xbf80;  // bf16 -1
      }
      at += 4 * sides;
      at = (at + 4095) / 4096 * 4096;
      m.w.data = codes;
      m.w.scales = sc;
      m.w.biases = bi;
      mats.push_back(m);
    }
  };
  uint8_t* base = alloc(false);
  if (base == nullptr) {
    std::printf("lab_int8_decode_cpu: cannot map %zu bytes\n", total);
    return 1;
  }
  std::vector<Mat> mats;
  fill(base, mats);
  double all_bytes = 0;
  for (double b : kind_bytes) all_bytes += b;
  std::printf("weights: %.3f GB per token (4 KiB pages)\n", all_bytes / 1e9);

  Activations act;
  act.x.resize(8192);
  uint64_t st = 12345;
  for (float& v : act.x) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(st >> 40) - (1 << 23)) / (1 << 23);
  }
  act.q2.resize(2048), act.d2.resize(32), act.s2.resize(32);
  act.q8.resize(8192), act.d8.resize(128), act.s8.resize(128);
  quantize_row(act.x.data(), 2048, 64, 8, 64, act.q2.data(), act.d2.data(), act.s2.data(), 1);
  quantize_row(act.x.data(), 8192, 64, 8, 64, act.q8.data(), act.d8.data(), act.s8.data(), 1);
  std::vector<float> y(128256), ref(128256);

  auto shipped = [&](CpuContext& ctx, const Mat& m, float* out) {
    int8_linear(ctx, m.w, act.x.data(), 1, out);
  };
  // The batch-invariant decode: the same matrices with their rows16 copies (the engine's load
  // path, models/llama_model.cpp prepare_rows16), one per matrix, keyed by its codes.
  std::vector<std::vector<uint8_t>> rows16_store;
  std::vector<std::pair<const void*, WeightMatrix>> rows16_mats;
  for (const Mat& m : mats) {
    const Rows16Bytes bytes = rows16_bytes(m.w);
    rows16_store.emplace_back(bytes.codes);
    rows16_store.emplace_back(bytes.side);
    rows16_store.emplace_back(bytes.side);
    const std::size_t n = rows16_store.size();
    interleave_rows16(m.w, rows16_store[n - 3].data(), rows16_store[n - 2].data(),
                      rows16_store[n - 1].data());
    WeightMatrix w = m.w;
    w.rows16 = rows16_store[n - 3].data();
    w.rows16_scales = rows16_store[n - 2].data();
    w.rows16_biases = rows16_store[n - 1].data();
    rows16_mats.emplace_back(m.w.data, w);
  }
  auto rows16 = [&](CpuContext& ctx, const Mat& m, float* out) {
    for (const auto& [key, w] : rows16_mats) {
      if (key == m.w.data) return int8_linear(ctx, w, act.x.data(), 1, out), void();
    }
  };
  auto variant = [&](const Knobs& k) -> Run {
    return [&act, k](CpuContext& ctx, const Mat& m, float* out) {
      const bool wide = m.w.cols == 8192;
      const int8_t* xq = wide ? act.q8.data() : act.q2.data();
      const float* d = wide ? act.d8.data() : act.d2.data();
      const float* s = wide ? act.s8.data() : act.s2.data();
      auto body = [&](int64_t r0, int64_t r1) {
        switch (k.rows) {
          case 1:
            return lab_range<1>(m.w, xq, d, s, r0, r1, out, k);
          case 2:
            return lab_range<2>(m.w, xq, d, s, r0, r1, out, k);
          case 8:
            return lab_range<8>(m.w, xq, d, s, r0, r1, out, k);
          default:
            return lab_range<4>(m.w, xq, d, s, r0, r1, out, k);
        }
      };
      if (k.chunk_rows == 0) {
        ctx.pool.parallel_for(m.w.rows, 8, body);
      } else {
        std::atomic<int64_t> next{0};
        ctx.pool.parallel_for(ctx.pool.size(), 1, [&](int64_t, int64_t) {
          for (;;) {
            const int64_t r0 = next.fetch_add(k.chunk_rows);
            if (r0 >= m.w.rows) return;
            body(r0, std::min(m.w.rows, r0 + k.chunk_rows));
          }
        });
      }
    };
  };
  auto reader = [](const Knobs& k) -> Run {
    return [k](CpuContext& ctx, const Mat& m, float* out) {
      ctx.pool.parallel_for(m.w.rows, 8,
                            [&](int64_t r0, int64_t r1) { read_range(m.w, r0, r1, out, k); });
    };
  };

  // Check every variant against the shipped kernel on the head and one down matrix.
  auto check = [&](CpuContext& ctx, const Run& run) {
    double worst = 0;
    for (const Mat* m : {&mats.back(), &mats[6]}) {
      int8_linear(ctx, m->w, act.x.data(), 1, ref.data());
      run(ctx, *m, y.data());
      for (int64_t r = 0; r < m->w.rows; ++r) {
        worst = std::max(worst, std::abs(static_cast<double>(y[r]) - ref[r]) /
                                    (std::abs(static_cast<double>(ref[r])) + 1.0));
      }
    }
    return worst;
  };
  struct Case {
    std::string name;
    Run run;
    bool is_read;
  };
  auto knobs = [](bool lean, int rows, int64_t pf, int hint, int64_t pf2, int64_t chunk) {
    Knobs k;
    k.lean = lean, k.rows = rows, k.pf = pf, k.hint = hint, k.pf2 = pf2, k.chunk_rows = chunk;
    return k;
  };
  std::vector<Case> cases = {
      {"read pf8K", reader(knobs(false, 4, 8192, 0, 0, 0)), true},
      {"read pf4K", reader(knobs(false, 4, 4096, 0, 0, 0)), true},
      {"read nopf", reader(knobs(false, 4, 0, 0, 0, 0)), true},
      {"shipped", shipped, false},
      {"rows16 (batch-invariant)", rows16, false},
      {"old form R4 pf8K", variant(knobs(false, 4, 8192, 0, 0, 0)), false},
      {"lean R4 8K (=shipped)", variant(knobs(true, 4, 8192, 0, 0, 0)), false},
      {"lean R4 4K", variant(knobs(true, 4, 4096, 0, 0, 0)), false},
      {"lean R4 12K", variant(knobs(true, 4, 12288, 0, 0, 0)), false},
      {"lean R4 16K", variant(knobs(true, 4, 16384, 0, 0, 0)), false},
      {"lean R4 24K", variant(knobs(true, 4, 24576, 0, 0, 0)), false},
      {"lean R4 8K+T2 32K", variant(knobs(true, 4, 8192, 0, 32768, 0)), false},
      {"lean R4 4K+T2 16K", variant(knobs(true, 4, 4096, 0, 16384, 0)), false},
      {"lean R4 8K T1", variant(knobs(true, 4, 8192, 1, 0, 0)), false},
      {"lean R2 8K", variant(knobs(true, 2, 8192, 0, 0, 0)), false},
      {"lean R8 8K", variant(knobs(true, 8, 8192, 0, 0, 0)), false},
      {"lean R8 16K", variant(knobs(true, 8, 16384, 0, 0, 0)), false},
      {"lean R4 8K chunk32", variant(knobs(true, 4, 8192, 0, 0, 32)), false},
      {"lean R4 8K chunk128", variant(knobs(true, 4, 8192, 0, 0, 128)), false},
  };
  for (int threads : {1, 2}) {
    CpuContext ctx(threads);
    std::printf("\n== %d thread%s (ms per token of linears; GB/s; per kind ms)\n", threads,
                threads > 1 ? "s" : "");
    for (const Case& c : cases) {
      if (!c.is_read) {
        const double err = check(ctx, c.run);
        if (err > 1e-4) {
          std::printf("  %-22s MISMATCH rel err %.2e\n", c.name.c_str(), err);
          continue;
        }
      }
      const Timing t = time_token(ctx, mats, c.run, y.data(), 5);
      std::printf("  %-22s %7.2f ms %6.1f GB/s |", c.name.c_str(), t.total_ms,
                  all_bytes / t.total_ms / 1e6);
      for (int k = 0; k < 5; ++k) {
        std::printf(" %s %.2f (%.1f)", kKinds[k], t.kind_ms[k], kind_bytes[k] / t.kind_ms[k] / 1e6);
      }
      std::printf("\n");
    }
  }
  // The same shipped kernel on transparent huge pages (TLB reach) where the kernel grants them.
  munmap(base, total);
  base = alloc(true);
  if (base != nullptr) {
    mats.clear();
    fill(base, mats);
    for (int threads : {1, 2}) {
      CpuContext ctx(threads);
      for (const Case& c : {cases[0], cases[3]}) {
        const Timing t = time_token(ctx, mats, c.run, y.data(), 5);
        std::printf("  THP %d thr %-14s %7.2f ms %6.1f GB/s\n", threads, c.name.c_str(), t.total_ms,
                    all_bytes / t.total_ms / 1e6);
      }
    }
    munmap(base, total);
  }
  return 0;
}

}  // namespace
}  // namespace hearth::kernels::cpu

int main() { return hearth::kernels::cpu::lab_main(); }
#else
int main() {
  std::puts("lab_int8_decode_cpu: needs an AVX512-VNNI build (HEARTH_NATIVE=ON on such a CPU)");
  return 0;
}
#endif
