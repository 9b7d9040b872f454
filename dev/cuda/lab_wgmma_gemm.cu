// Lab for the Hopper wgmma GEMM (issue 6): src's wgmma_gemm against cuBLASLt (GemmBf16) on
// the 8B shapes (qkv, o, gate_up, down, lm_head) at m = 8..128, timed as a decode step runs
// them: weights from DRAM (each timed chain rotates over > 256 MB of distinct weight copies,
// so the 60 MB L2 never holds them) and calls replayed from one CUDA graph. Every variant's
// output is checked against cuBLASLt's (bf16: within one rounding; a failed check prints and
// the lab goes on). Then an 8-layer chain of the four layer GEMMs per m.
// Forms timed: the plan's (clusters where tiles are fewer than SMs) and stream-K, each with and
// without PDL. Environment: LAB_ONLY=<shape> (that sweep alone, no checks, no chain), LAB_M=<m>,
// LAB_GRIDS=<g,...> (stream-K on those grids), LAB_CANDIDATES=1 (also every cuBLASLt
// candidate, and the chain of the per-shape fastest).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemm_wgmma.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kMaxRows = 256;  // cuBLASLt up to 256 rows; wgmma_gemm up to kWgmmaMaxRows

struct Workspace {
  float* partials = nullptr;
  unsigned* counters = nullptr;
  size_t partial_floats = size_t{32} << 20;  // 128 MB
  int counter_count = 1 << 16;
};

WgmmaGemmArgs make_args(int m, int n, int k, const Bf16* x, const Bf16* w, void* y, bool f32,
                        int sm, bool pdl, int grid, const Workspace& ws) {
  WgmmaGemmArgs a;
  a.x = x;
  a.ldx = k;
  a.w = w;
  a.ldw = k;
  a.y = y;
  a.ldy = n;
  a.y_f32 = f32;
  a.m = m;
  a.n = n;
  a.k = k;
  a.sm_count = sm;
  a.pdl = pdl;
  a.grid = grid;
  a.partials = ws.partials;
  a.counters = ws.counters;
  return a;
}

// The fastest cuBLASLt candidate per (shape name, m), from shape_sweep for layer_chain.
using BestCandidates = std::map<std::pair<std::string, int>, int>;

void shape_sweep(DeviceContext& ctx, const WeightShape& s, double copy_bw, const Workspace& ws,
                 bool checks, BestCandidates& best) {
  cudaStream_t st = ctx.stream();
  const int sm = ctx.properties().multiProcessorCount;
  const RotatedWeights rw(s, st);
  const size_t wbytes = rw.bytes;
  const int copies = rw.copies;
  const int calls = rw.calls;
  Bf16* x = nullptr;
  Bf16* y_ref = nullptr;
  Bf16* y = nullptr;
  float* yf_ref = nullptr;
  float* yf = nullptr;
  CK(cudaMalloc(&x, size_t(kMaxRows) * s.k * 2));
  CK(cudaMalloc(&y_ref, size_t(kMaxRows) * s.n * 2));
  CK(cudaMalloc(&y, size_t(kMaxRows) * s.n * 2));
  CK(cudaMalloc(&yf_ref, size_t(kMaxRows) * s.n * 4));
  CK(cudaMalloc(&yf, size_t(kMaxRows) * s.n * 4));
  CK(fill_random_bf16(x, size_t(kMaxRows) * s.k, 7, 1.0f, st));
  Bf16* const w = rw.w;
  GemmBf16Options cublas_only;
  cublas_only.wgmma = false;
  GemmBf16 gemm(ctx, cublas_only);
  std::printf("\n== %s %dx%d (%.1f MB bf16, %d copies, %d calls a graph)\n", s.name, s.n, s.k,
              wbytes / 1e6, copies, calls);

  // Correctness of odd shapes first: ragged m, accumulate, f32 out.
  for (int m : {1, 5, 37, 100}) {
    if (!checks) break;
    for (int mode = 0; mode < 3; ++mode) {  // 0 bf16, 1 bf16 accumulate, 2 f32 accumulate
      const bool f32 = mode == 2;
      const bool accumulate = mode != 0;
      try {
        const size_t count = size_t(m) * s.n;
        if (f32) {
          CK(cudaMemsetAsync(yf_ref, 0, count * 4, st));
          CK(cudaMemsetAsync(yf, 0, count * 4, st));
        } else {
          CK(fill_random_bf16(y_ref, count, 5, 1.0f, st));
          CK(cudaMemcpyAsync(y, y_ref, count * 2, cudaMemcpyDeviceToDevice, st));
        }
        GemmShape g{m, s.n, s.k, s.k, s.k, s.n, f32 ? GemmOut::kF32 : GemmOut::kBf16, accumulate};
        CK(gemm.run(g, x, w, f32 ? static_cast<void*>(yf_ref) : y_ref));
        WgmmaGemmArgs a =
            make_args(m, s.n, s.k, x, w, f32 ? static_cast<void*>(yf) : y, f32, sm, false, 0, ws);
        a.accumulate = accumulate;
        CK(wgmma_gemm(a, st));
        CK(cudaStreamSynchronize(st));
        const double r =
            f32 ? check_ratio(to_host_f32(yf, count), to_host_f32(yf_ref, count), true, accumulate)
                : check_ratio(to_host_bf16(y, count), to_host_bf16(y_ref, count), false,
                              accumulate);
        std::printf("  check m=%d %s%s: %s (worst %.2f of tolerance)\n", m, f32 ? "f32" : "bf16",
                    accumulate ? " accumulate" : "", r <= 1 ? "ok" : "FAIL", r);
      } catch (const std::exception& e) {
        std::printf("  check m=%d mode %d: ERROR %s\n", m, mode, e.what());
      }
    }
  }

  // Row invariance (is a row's result the same bits whatever the row count?): the first m rows
  // of x at m = 1, 16, 37, 64, 100 against the same rows of a 128-row call, f32 outputs, for
  // wgmma_gemm (its k order and split points depend on n and k only; the wgmma's N does on m)
  // and for GemmBf16's default route (the GEMV at m <= 8, else cuBLASLt, which picks its kernel
  // by m). A "yes" for wgmma makes it a candidate
  // for a batch-invariant decode path that needs no 64-row padding.
  if (checks) {
    auto rows_of = [&](auto&& run_m, int m) {
      CK(cudaMemsetAsync(yf, 0, size_t(kMaxRows) * s.n * 4, st));
      run_m(m);
      CK(cudaStreamSynchronize(st));
      return to_host_f32(yf, size_t(m) * s.n);
    };
    auto wgmma_m = [&](int m) {
      CK(wgmma_gemm(make_args(m, s.n, s.k, x, w, yf, true, sm, false, 0, ws), st));
    };
    auto cublas_m = [&](int m) {
      CK(gemm.run(GemmShape{m, s.n, s.k, s.k, s.k, s.n, GemmOut::kF32, false}, x, w, yf));
    };
    for (int which = 0; which < 2; ++which) {
      const std::vector<float> whole = which == 0 ? rows_of(wgmma_m, 128) : rows_of(cublas_m, 128);
      std::string line;
      for (int m : {1, 16, 37, 64, 100}) {
        const std::vector<float> part = which == 0 ? rows_of(wgmma_m, m) : rows_of(cublas_m, m);
        const bool same = std::memcmp(part.data(), whole.data(), part.size() * 4) == 0;
        line += " m=" + std::to_string(m) + (same ? " same" : " DIFFERENT");
      }
      std::printf("  row invariance vs m=128, %s:%s\n", which == 0 ? "wgmma" : "default route",
                  line.c_str());
    }
  }

  const char* only_m = std::getenv("LAB_M");  // one row count alone (profiling)
  for (int m : {8, 16, 32, 64, 128, 256}) {
    if (only_m != nullptr && m != std::atoi(only_m)) continue;
    const size_t count = size_t(m) * s.n;
    GemmShape g{m, s.n, s.k, s.k, s.k, s.n, GemmOut::kBf16, false};
    double cublas_us = 0;
    try {
      CK(gemm.run(g, x, w, y_ref));
      CK(cudaStreamSynchronize(st));
      cublas_us = graph_us(st, calls, [&](int i) { CK(gemm.run(g, x, rw.copy(i), y)); });
    } catch (const std::exception& e) {
      std::printf("  m=%d cuBLASLt ERROR %s\n", m, e.what());
      continue;
    }
    const std::vector<float> ref = to_host_bf16(y_ref, count);
    auto pct = [&](double us) { return 100.0 * wbytes / (us * 1e-6) / copy_bw; };
    if (std::getenv("LAB_CANDIDATES") != nullptr) {
      // Every cuBLASLt candidate of the shape, timed the same way (0 is the default pick).
      auto counted = gemm.candidates(g);
      if (!counted.ok()) throw std::runtime_error(counted.status().to_string());
      const int n_cand = *counted;
      std::string cands;
      double best_us = cublas_us;
      int best_i = 0;
      for (int i = 1; i < n_cand; ++i) {
        try {
          CK(gemm.choose(g, i));
          CK(cudaMemsetAsync(y, 0, count * 2, st));
          CK(gemm.run(g, x, w, y));
          CK(cudaStreamSynchronize(st));
          const bool ok = check_ratio(to_host_bf16(y, count), ref, false) <= 1;
          const double us = graph_us(st, calls, [&](int j) { CK(gemm.run(g, x, rw.copy(j), y)); });
          char buf[64];
          std::snprintf(buf, sizeof(buf), " | %d %.1f%s", i, us, ok ? "" : " FAIL");
          cands += buf;
          if (ok && us < best_us) {
            best_us = us;
            best_i = i;
          }
        } catch (const std::exception& e) {
          cands += std::string(" | ") + std::to_string(i) + " ERROR";
        }
      }
      CK(gemm.choose(g, 0));
      best[{s.name, m}] = best_i;
      std::printf("  m=%3d cuBLASLt candidates (us): 0 %.1f%s -> best %d %.1f us (%.2fx)\n", m,
                  cublas_us, cands.c_str(), best_i, best_us, cublas_us / best_us);
    }
    std::string line;
    // The plan's form (clusters where tiles are fewer than SMs) and stream-K; LAB_GRIDS="48,96":
    // stream-K on these grids instead.
    std::vector<std::pair<int, int>> forms = {{0, 0}, {0, 1}};  // (grid, cluster)
    if (const char* env = std::getenv("LAB_GRIDS")) {
      forms.clear();
      for (const char* p = env; *p != 0;) {
        forms.push_back({std::atoi(p), 1});
        while (*p != 0 && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    }
    for (int pdl = 0; pdl < 2 && m <= kWgmmaMaxRows; ++pdl) {
      for (const auto& [grid, cluster] : forms) {
        WgmmaGemmArgs a = make_args(m, s.n, s.k, x, w, y, false, sm, pdl != 0, grid, ws);
        a.cluster = cluster;
        const WgmmaGemmPlan plan = wgmma_gemm_plan(a);
        char name[64];
        std::snprintf(name, sizeof(name), "%s%d%s", plan.cluster > 1 ? "c" : "g",
                      plan.cluster > 1 ? plan.cluster : plan.grid, pdl ? " pdl" : "");
        try {
          CK(cudaMemsetAsync(y, 0, count * 2, st));
          CK(wgmma_gemm(a, st));
          CK(cudaStreamSynchronize(st));
          const double r = check_ratio(to_host_bf16(y, count), ref, false);
          const double us = graph_us(st, calls, [&](int i) {
            WgmmaGemmArgs b = a;
            b.w = rw.copy(i);
            CK(wgmma_gemm(b, st));
          });
          char buf[128];
          std::snprintf(buf, sizeof(buf), " | %s %.1f us %.1f%% %.2fx%s", name, us, pct(us),
                        cublas_us / us, r <= 1 ? "" : " CHECK FAIL");
          line += buf;
        } catch (const std::exception& e) {
          line += std::string(" | ") + name + " ERROR " + e.what();
        }
      }
    }
    std::printf("  m=%3d cuBLASLt %7.1f us (%5.1f%%)%s\n", m, cublas_us, pct(cublas_us),
                line.c_str());
    std::fflush(stdout);
  }
  CK(cudaFree(x));
  CK(cudaFree(y_ref));
  CK(cudaFree(y));
  CK(cudaFree(yf_ref));
  CK(cudaFree(yf));
}

// 8 layers x (qkv, o, gate_up, down), distinct weights, one graph: cuBLASLt vs wgmma.
void layer_chain(DeviceContext& ctx, double copy_bw, const Workspace& ws,
                 const BestCandidates& best) {
  cudaStream_t st = ctx.stream();
  const int sm = ctx.properties().multiProcessorCount;
  constexpr int kLayers = LayerWeights::kLayers;
  const LayerWeights weights(st);
  const size_t layer_bytes = weights.layer_bytes;
  Bf16* x = nullptr;
  Bf16* y = nullptr;
  CK(cudaMalloc(&x, size_t(kMaxRows) * 14336 * 2));
  CK(cudaMalloc(&y, size_t(kMaxRows) * 28672 * 2));
  CK(fill_random_bf16(x, size_t(kMaxRows) * 14336, 9, 1.0f, st));
  GemmBf16Options cublas_only;
  cublas_only.wgmma = false;
  GemmBf16 gemm(ctx, cublas_only);
  std::printf("\n== 8-layer chain (qkv+o+gate_up+down, %.0f MB a layer), us a layer:\n",
              layer_bytes / 1e6);
  for (int m : {8, 16, 32, 64, 128, 256}) {
    const char* only_m = std::getenv("LAB_M");
    if (only_m != nullptr && m != std::atoi(only_m)) continue;
    try {
      auto run = [&](int which, bool pdl) {
        return graph_us(st, kLayers, [&](int l) {
          for (int i = 0; i < 4; ++i) {
            const int n = kLlama8bShapes[i].n;
            const int k = kLlama8bShapes[i].k;
            if (which <= 1) {
              GemmShape g{m, n, k, k, k, n, GemmOut::kBf16, false};
              auto it = best.find({kLlama8bShapes[i].name, m});
              CK(gemm.choose(g, which == 1 && it != best.end() ? it->second : 0));
              CK(gemm.run(g, x, weights.at(l, i), y));
            } else {
              CK(wgmma_gemm(make_args(m, n, k, x, weights.at(l, i), y, false, sm, pdl, 0, ws), st));
            }
          }
        });
      };
      const double c = run(0, false);
      const double t = run(1, false);
      const double s = m <= kWgmmaMaxRows ? run(2, false) : 0.0;
      const double p = m <= kWgmmaMaxRows ? run(2, true) : 0.0;
      auto pct = [&](double us) { return 100.0 * layer_bytes / (us * 1e-6) / copy_bw; };
      std::printf(
          "  m=%3d cuBLASLt %6.1f us (%5.1f%%) | cuBLASLt best candidates %6.1f us (%5.1f%%) | "
          "wgmma %6.1f us (%5.1f%%) | wgmma+pdl %6.1f us (%5.1f%%)\n",
          m, c, pct(c), t, pct(t), s, pct(s), p, pct(p));
    } catch (const std::exception& e) {
      std::printf("  m=%d ERROR %s\n", m, e.what());
    }
    std::fflush(stdout);
  }
  CK(cudaFree(x));
  CK(cudaFree(y));
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  using namespace hearth::cuda;
  using namespace hearth::cuda::dev;
  return run_reported("lab_wgmma_gemm", [](DeviceContext& ctx) {
    cudaStream_t st = ctx.stream();
    const double copy_bw = measure_copy_bandwidth(st);
    Workspace ws;
    CK(cudaMalloc(&ws.partials, ws.partial_floats * 4));
    CK(cudaMalloc(&ws.counters, size_t(ws.counter_count) * 4));
    CK(cudaMemset(ws.counters, 0, size_t(ws.counter_count) * 4));
    // LAB_ONLY=<shape> runs that shape's sweep alone (no checks, no chain): one kernel per
    // variant and m, for a profiler.
    const bool all = std::getenv("LAB_ONLY") == nullptr;
    BestCandidates best;
    for_each_llama8b_shape(
        [&](const WeightShape& s) { shape_sweep(ctx, s, copy_bw, ws, all, best); });
    if (all) layer_chain(ctx, copy_bw, ws, best);
  });
}
