// Lab (issue 6, the 64-row decode step): split-K as a strided batch whose f32 partials the next
// kernel sums. At 64 rows cuBLASLt covers the o and qkv shapes with 64-96 tiles (one block a
// tile, 64-96 of the 132 multiprocessors streaming) and splits the down projection's k with a
// reduce kernel of its own after the GEMM. Here each of those GEMMs is one cuBLASLt call over S
// k-slices as a strided batch (w and x advance k/S columns a slice, y is S f32 matrices), and
// the kernel that consumes y anyway (a norm, RoPE, the SiLU gate) would sum the S partials as it
// reads them: more blocks streaming, no reduce kernel, no extra launch.
// Per 8B shape at LAB_M rows (default 64), weights from DRAM (calls rotate over > 256 MB of
// weight copies, one CUDA graph), each GEMM followed by the consumer stand-in it would have:
//   - base: GemmBf16's route (bf16 y), then a kernel that reads y and writes a bf16 row;
//   - split S: the batched call (each of cuBLASLt's candidates), then a kernel that sums the S
//     partials in slice order and writes the same bf16 row.
// Each split form's output is checked against base (within one bf16 rounding). Then an 8-layer
// chain of the four shapes, base against the best split per shape.
// Environment: LAB_M=<m> (default 64), LAB_ONLY=<shape>.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"

namespace hearth::cuda::dev {

namespace {

// The consumer stand-ins: out[r, c] = bf16(sum over s of partials[s][r, c]) in slice order (four
// columns a thread), or y's bf16 rows copied to out (eight a thread) for base.
__global__ void sum_partials_kernel(const float* partials, int slices, int64_t slice_stride,
                                    int64_t count4, __nv_bfloat16* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= count4) return;
  float4 acc = reinterpret_cast<const float4*>(partials)[i];
  for (int s = 1; s < slices; ++s) {
    const float4 p = reinterpret_cast<const float4*>(partials + s * slice_stride)[i];
    acc.x += p.x;
    acc.y += p.y;
    acc.z += p.z;
    acc.w += p.w;
  }
  __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x, acc.y);
  __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z, acc.w);
  reinterpret_cast<__nv_bfloat162*>(out)[2 * i] = lo;
  reinterpret_cast<__nv_bfloat162*>(out)[2 * i + 1] = hi;
}

__global__ void copy_rows_kernel(const uint4* y, int64_t count8, uint4* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count8) out[i] = y[i];
}

cudaError_t sum_partials(const float* partials, int slices, int64_t slice_stride, int rows,
                         int cols, __nv_bfloat16* out, cudaStream_t stream) {
  const int64_t count4 = int64_t(rows) * cols / 4;
  sum_partials_kernel<<<unsigned((count4 + 255) / 256), 256, 0, stream>>>(
      partials, slices, slice_stride, count4, out);
  return cudaGetLastError();
}

cudaError_t copy_rows(const __nv_bfloat16* y, int rows, int cols, __nv_bfloat16* out,
                      cudaStream_t stream) {
  const int64_t count8 = int64_t(rows) * cols / 8;
  copy_rows_kernel<<<unsigned((count8 + 255) / 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(y), count8, reinterpret_cast<uint4*>(out));
  return cudaGetLastError();
}

using Bf16 = __nv_bfloat16;

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
  }
}

// One strided-batched cuBLASLt problem: S slices of y_s = x[:, s·kc:(s+1)·kc] · w[:, s·kc:..]ᵀ
// (f32), in cuBLAS's column-major terms as GemmBf16 does (A = w transposed, B = x).
struct SplitPlan {
  int m = 0, n = 0, k = 0, slices = 0;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;
  SplitPlan(DeviceContext& ctx, int m_, int n_, int k_, int slices_)
      : m(m_), n(n_), k(k_), slices(slices_) {
    const int kc = k / slices;
    check_lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    cublasOperation_t ta = CUBLAS_OP_T;
    cublasOperation_t tb = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
             "transa");
    check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
             "transb");
    auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, int rows, int cols, int64_t ld,
                      int64_t stride) {
      check_lt(cublasLtMatrixLayoutCreate(l, t, rows, cols, ld), "layout");
      if (slices == 1) return;
      check_lt(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &slices,
                                                sizeof(slices)),
               "batch count");
      check_lt(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &stride, sizeof(stride)),
               "batch stride");
    };
    layout(&a, CUDA_R_16BF, kc, n, k, kc);
    layout(&b, CUDA_R_16BF, kc, m, k, kc);
    layout(&c, CUDA_R_32F, n, m, n, int64_t(m) * n);
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "pref");
    size_t ws = ctx.workspace_size();
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    cublasLtMatmulHeuristicResult_t h[8]{};
    int found = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt(), desc, a, b, c, c, pref, 8, h, &found),
             "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    for (int i = 0; i < found; ++i) algos.push_back(h[i].algo);
  }
  ~SplitPlan() {
    for (auto l : {a, b, c}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
  }
  SplitPlan(const SplitPlan&) = delete;
  SplitPlan& operator=(const SplitPlan&) = delete;
  void run(DeviceContext& ctx, int cand, const Bf16* x, const Bf16* w, float* y) const {
    const float alpha = 1.0f;
    const float beta = 0.0f;
    check_lt(cublasLtMatmul(ctx.cublaslt(), desc, &alpha, w, a, x, b, &beta, y, c, y, c,
                            &algos[cand], ctx.workspace(), ctx.workspace_size(), ctx.stream()),
             "split matmul");
  }
  std::string describe(int cand) const {
    const cublasLtMatmulAlgo_t& al = algos[cand];
    int id = 0, tile = 0, splitk = 0, stages = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&al, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                         &w);
    cublasLtMatmulAlgoConfigGetAttribute(&al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                         sizeof(splitk), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                         sizeof(stages), &w);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "id=%d tile=%d stages=%d splitk=%d", id, tile, stages, splitk);
    return buf;
  }
};

// The fastest (slices, candidate) per shape, for the chain.
struct Best {
  int slices = 1;
  int cand = 0;
  double us = 0;
};

Best sweep(DeviceContext& ctx, const WeightShape& s, int m, double copy_bw) {
  cudaStream_t st = ctx.stream();
  const RotatedWeights rw(s, st);
  const size_t wbytes = rw.bytes;
  const int copies = rw.copies;
  const int calls = rw.calls;
  constexpr int kMaxSlices = 16;
  Bf16* x = nullptr;
  Bf16* y = nullptr;
  Bf16* out_ref = nullptr;
  Bf16* out = nullptr;
  float* parts = nullptr;
  CK(cudaMalloc(&x, size_t(m) * s.k * 2));
  CK(cudaMalloc(&y, size_t(m) * s.n * 2));
  CK(cudaMalloc(&out_ref, size_t(m) * s.n * 2));
  CK(cudaMalloc(&out, size_t(m) * s.n * 2));
  CK(cudaMalloc(&parts, size_t(kMaxSlices) * m * s.n * 4));
  CK(fill_random_bf16(x, size_t(m) * s.k, 7, 1.0f, st));
  Bf16* const w = rw.w;
  auto pct = [&](double us) { return 100.0 * wbytes / (us * 1e-6) / copy_bw; };
  GemmBf16Options cublas_only;
  cublas_only.wgmma = false;
  GemmBf16 gemm(ctx, cublas_only);
  const GemmShape g{m, s.n, s.k, s.k, s.k, s.n, GemmOut::kBf16, false};
  CK(gemm.run(g, x, w, y));
  CK(copy_rows(y, m, s.n, out_ref, st));
  CK(cudaStreamSynchronize(st));
  const std::vector<float> ref = to_host_bf16(out_ref, size_t(m) * s.n);
  auto described = gemm.describe(g);
  std::printf("\n== %s %dx%d m=%d (%.1f MB, %d copies, %d calls a graph)\n", s.name, s.n, s.k, m,
              wbytes / 1e6, copies, calls);
  const double gemm_only = graph_us(st, calls, [&](int i) { CK(gemm.run(g, x, rw.copy(i), y)); });
  const double base = graph_us(st, calls, [&](int i) {
    CK(gemm.run(g, x, rw.copy(i), y));
    CK(copy_rows(y, m, s.n, out, st));
  });
  std::printf("  base %-40s gemm %6.1f us (%5.1f%%)  + consumer %6.1f us (%5.1f%%)\n",
              described.ok() ? described->c_str() : "?", gemm_only, pct(gemm_only), base,
              pct(base));
  Best best{1, 0, base};
  for (int slices : {2, 3, 4, 6, 7, 8, 14, 16}) {
    if (s.k % (slices * 64) != 0 || slices > kMaxSlices) continue;
    SplitPlan plan(ctx, m, s.n, s.k, slices);
    for (int cand = 0; cand < static_cast<int>(plan.algos.size()); ++cand) {
      try {
        CK(cudaMemsetAsync(out, 0, size_t(m) * s.n * 2, st));
        plan.run(ctx, cand, x, w, parts);
        CK(sum_partials(parts, slices, int64_t(m) * s.n, m, s.n, out, st));
        CK(cudaStreamSynchronize(st));
        const double r = check_ratio(to_host_bf16(out, size_t(m) * s.n), ref, false);
        const double only =
            graph_us(st, calls, [&](int i) { plan.run(ctx, cand, x, rw.copy(i), parts); });
        const double us = graph_us(st, calls, [&](int i) {
          plan.run(ctx, cand, x, rw.copy(i), parts);
          CK(sum_partials(parts, slices, int64_t(m) * s.n, m, s.n, out, st));
        });
        std::printf(
            "  S=%-2d #%d %-34s gemm %6.1f us (%5.1f%%)  + sum %6.1f us (%5.1f%%) %.2fx %s\n",
            slices, cand, plan.describe(cand).c_str(), only, pct(only), us, pct(us), base / us,
            r <= 1 ? "ok" : "FAIL");
        if (r <= 1 && us < best.us) best = {slices, cand, us};
      } catch (const std::exception& e) {
        std::printf("  S=%d #%d: ERROR %s\n", slices, cand, e.what());
      }
      std::fflush(stdout);
    }
  }
  std::printf("  best: S=%d #%d %.1f us against base %.1f (%.2fx)\n", best.slices, best.cand,
              best.us, base, base / best.us);
  for (void* p :
       {static_cast<void*>(w), static_cast<void*>(x), static_cast<void*>(y),
        static_cast<void*>(out_ref), static_cast<void*>(out), static_cast<void*>(parts)}) {
    CK(cudaFree(p));
  }
  return best;
}

// 8 layers x (qkv, o, gate_up, down) with consumers, distinct weights, one graph: base against
// each shape's best split form.
void layer_chain(DeviceContext& ctx, int m, double copy_bw,
                 const std::map<std::string, Best>& best) {
  cudaStream_t st = ctx.stream();
  constexpr int kLayers = LayerWeights::kLayers;
  const LayerWeights weights(st);
  const size_t layer_bytes = weights.layer_bytes;
  Bf16* x = nullptr;
  Bf16* y = nullptr;
  Bf16* out = nullptr;
  float* parts = nullptr;
  CK(cudaMalloc(&x, size_t(m) * 14336 * 2));
  CK(cudaMalloc(&y, size_t(m) * 28672 * 2));
  CK(cudaMalloc(&out, size_t(m) * 28672 * 2));
  CK(cudaMalloc(&parts, size_t(16) * m * 28672 * 4));
  CK(fill_random_bf16(x, size_t(m) * 14336, 9, 1.0f, st));
  GemmBf16Options cublas_only;
  cublas_only.wgmma = false;
  GemmBf16 gemm(ctx, cublas_only);
  std::vector<std::unique_ptr<SplitPlan>> plans(4);
  std::vector<int> cands(4, 0);
  for (int i = 0; i < 4; ++i) {
    auto it = best.find(kLlama8bShapes[i].name);
    if (it == best.end() || it->second.slices == 1) continue;
    plans[i] = std::make_unique<SplitPlan>(ctx, m, kLlama8bShapes[i].n, kLlama8bShapes[i].k,
                                           it->second.slices);
    cands[i] = it->second.cand;
  }
  auto run = [&](bool split) {
    return graph_us(st, kLayers, [&](int l) {
      for (int i = 0; i < 4; ++i) {
        const int n = kLlama8bShapes[i].n;
        const int k = kLlama8bShapes[i].k;
        if (split && plans[i] != nullptr) {
          plans[i]->run(ctx, cands[i], x, weights.at(l, i), parts);
          CK(sum_partials(parts, plans[i]->slices, int64_t(m) * n, m, n, out, st));
        } else {
          const GemmShape g{m, n, k, k, k, n, GemmOut::kBf16, false};
          CK(gemm.run(g, x, weights.at(l, i), y));
          CK(copy_rows(y, m, n, out, st));
        }
      }
    });
  };
  auto pct = [&](double us) { return 100.0 * layer_bytes / (us * 1e-6) / copy_bw; };
  for (int round = 0; round < 2; ++round) {
    const double b = run(false);
    const double sp = run(true);
    std::printf(
        "  chain m=%d round %d: base %6.1f us a layer (%5.1f%%) | split %6.1f (%5.1f%%) %.3fx\n", m,
        round, b, pct(b), sp, pct(sp), b / sp);
  }
  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(out),
                  static_cast<void*>(parts)}) {
    CK(cudaFree(p));
  }
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  using namespace hearth::cuda;
  using namespace hearth::cuda::dev;
  return run_reported("lab_splitk_batched", [](DeviceContext& ctx) {
    const double copy_bw = measure_copy_bandwidth(ctx.stream());
    const char* env_m = std::getenv("LAB_M");
    const int m = env_m != nullptr ? std::atoi(env_m) : 64;
    std::map<std::string, Best> best;
    for (int i = 0; i < 4; ++i) {
      const WeightShape& s = kLlama8bShapes[i];
      const char* only = std::getenv("LAB_ONLY");
      if (only != nullptr && std::string(only) != s.name) continue;
      try {
        best[s.name] = sweep(ctx, s, m, copy_bw);
      } catch (const std::exception& e) {
        std::printf("%s: ERROR %s\n", s.name, e.what());
      }
    }
    std::printf("\n== 8-layer chain, each GEMM + its consumer stand-in\n");
    layer_chain(ctx, m, copy_bw, best);
  });
}
