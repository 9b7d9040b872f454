// Lab (issue 6, serving latency): what a GEMM's first call at a new row count costs the host.
// GemmBf16 plans every (m, n, k) on first use (a cuBLASLt heuristic query, then layouts); a
// server meets new row counts whenever a step packs a prefill chunk of a new length, and the
// query runs on the engine thread before the step's launches. For each 8B layer shape and a
// list of row counts never seen before, the host time of the first run() (plan + enqueue)
// against a repeat call's (enqueue alone), each after the stream drained.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;
using Clock = std::chrono::steady_clock;

double call_us(GemmBf16& gemm, const GemmShape& g, const Bf16* x, const Bf16* w, Bf16* y,
               cudaStream_t st) {
  CK(cudaStreamSynchronize(st));
  const auto t0 = Clock::now();
  CK(gemm.run(g, x, w, y));
  const auto t1 = Clock::now();
  CK(cudaStreamSynchronize(st));
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

void run_lab(DeviceContext& ctx) {
  cudaStream_t st = ctx.stream();
  constexpr int kMaxRows = 4096;
  const std::vector<int> rows = {9, 17, 31, 47, 100, 200, 333, 500, 777, 1500, 3000, 4096};
  GemmBf16 gemm(ctx, GemmBf16Options{});
  for (int i = 0; i < 4; ++i) {
    const WeightShape& s = kLlama8bShapes[i];
    Bf16* w = nullptr;
    Bf16* x = nullptr;
    Bf16* y = nullptr;
    CK(cudaMalloc(&w, size_t(s.n) * s.k * 2));
    CK(cudaMalloc(&x, size_t(kMaxRows) * s.k * 2));
    CK(cudaMalloc(&y, size_t(kMaxRows) * s.n * 2));
    CK(fill_random_bf16(w, size_t(s.n) * s.k, 3, 0.05f, st));
    CK(fill_random_bf16(x, size_t(kMaxRows) * s.k, 4, 1.0f, st));
    std::printf("\n== %s %dx%d: m, first call us, repeat us\n", s.name, s.n, s.k);
    double first_sum = 0;
    double repeat_sum = 0;
    for (int m : rows) {
      const GemmShape g{m, s.n, s.k, s.k, s.k, s.n, GemmOut::kBf16, false};
      const double first = call_us(gemm, g, x, w, y, st);
      const double repeat = call_us(gemm, g, x, w, y, st);
      first_sum += first;
      repeat_sum += repeat;
      std::printf("  m=%-5d %9.1f %9.1f\n", m, first, repeat);
    }
    std::printf("  mean    %9.1f %9.1f\n", first_sum / rows.size(), repeat_sum / rows.size());
    CK(cudaFree(w));
    CK(cudaFree(x));
    CK(cudaFree(y));
  }
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  return hearth::cuda::dev::run_reported(
      "lab_gemm_plan_cost",
      [](hearth::cuda::DeviceContext& ctx) { hearth::cuda::dev::run_lab(ctx); });
}
