// Lab for the batch-invariant bf16 GEMM (issue 6, --batch-invariant on CUDA): which cuBLASLt
// algorithm keeps a row's sums apart from the row count, and what it costs. For each 8B shape
// (qkv, o, gate_up, down, lm_head), for the plans of 64, 128 and 256 rows, every heuristic
// candidate runs as GemmBf16's kSingle form (one call over the rows padded to blocks of 64):
//   - invariance: 4096 rows in one call are the reference; 1 row (rows 0 and 77), 64 rows
//     from row 64, 256 rows from row 128, 300 rows from row 5 and 1000 from row 3 must give
//     their rows the same bytes (printed as "inv" or the first call that differs);
//   - the same for the kUnsplit form (the default), with its algorithm at 1-4096 rows;
//   - time at 64, 256 and 4096 rows, weights from DRAM (calls rotate over > 256 MB of weight
//     copies, replayed from one CUDA graph), beside the default (not invariant) route and the
//     shipped invariant form (kBatched, 64-row plan);
//   - which candidates give the 4096 rows the same bytes as each other ("bits #i": the first
//     candidate printed with those bytes), and whether the default route's do: an algorithm
//     whose bytes match another's may stand in for it at any row count.
// Environment: LAB_ONLY=<shape> (that shape alone), LAB_PLAN_ROWS=<p,...> (those plans; 0:
// none).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kRows = 4096;  // the reference call's rows

std::vector<int> plan_rows_from_env() {
  std::vector<int> rows;
  if (const char* env = std::getenv("LAB_PLAN_ROWS")) {
    for (const char* p = env; *p != 0;) {
      rows.push_back(std::atoi(p));
      while (*p != 0 && *p != ',') ++p;
      if (*p == ',') ++p;
    }
  }
  if (rows.empty()) rows = {64, 128, 256};
  rows.erase(std::remove(rows.begin(), rows.end(), 0), rows.end());
  return rows;
}

void sweep(DeviceContext& ctx, const WeightShape& s, const std::vector<int>& plan_rows) {
  cudaStream_t st = ctx.stream();
  const RotatedWeights rw(s, st);
  const size_t wbytes = rw.bytes;
  const int copies = rw.copies;
  const int calls = rw.calls;
  const size_t row_bytes = size_t(s.n) * 2;
  Bf16* x = nullptr;
  Bf16* y_ref = nullptr;
  Bf16* y = nullptr;
  CK(cudaMalloc(&x, size_t(kRows) * s.k * 2));
  CK(cudaMalloc(&y_ref, size_t(kRows) * row_bytes));
  CK(cudaMalloc(&y, size_t(kRows) * row_bytes));
  CK(fill_random_bf16(x, size_t(kRows) * s.k, 7, 1.0f, st));
  Bf16* const w = rw.w;
  auto shape = [&](int m) { return GemmShape{m, s.n, s.k, s.k, s.k, s.n, GemmOut::kBf16, false}; };
  auto time_rows = [&](GemmBf16& gemm, int m) {
    CK(gemm.run(shape(m), x, w, y));  // plans and layouts before the capture
    CK(cudaStreamSynchronize(st));
    const int n_calls = m >= 1024 ? 2 : calls;
    return graph_us(
        st, n_calls, [&](int i) { CK(gemm.run(shape(m), x, rw.copy(i), y)); }, 7);
  };
  std::printf("\n== %s %dx%d (%.1f MB bf16, %d copies)\n", s.name, s.n, s.k, wbytes / 1e6, copies);

  // The bytes of y's first `rows` rows as a hash, and the classes of equal bytes seen so far.
  auto bytes_hash = [&](const Bf16* dev, int rows) {
    std::vector<char> host(size_t(rows) * row_bytes);
    CK(cudaMemcpy(host.data(), dev, host.size(), cudaMemcpyDeviceToHost));
    return std::hash<std::string_view>{}(std::string_view(host.data(), host.size()));
  };
  std::vector<size_t> classes;
  auto class_of = [&](size_t hash) {
    for (size_t i = 0; i < classes.size(); ++i) {
      if (classes[i] == hash) return "bits #" + std::to_string(i);
    }
    classes.push_back(hash);
    return "bits #" + std::to_string(classes.size() - 1) + " (new)";
  };
  std::string default_bits;
  {
    GemmBf16Options plain;
    GemmBf16 gemm(ctx, plain);
    std::printf("  default route:            m=1 %8.1f us  m=64 %8.1f  m=256 %8.1f  m=4096 %9.1f\n",
                time_rows(gemm, 1), time_rows(gemm, 64), time_rows(gemm, 256),
                time_rows(gemm, kRows));
    GemmBf16Options shipped;
    shipped.batch_invariant = true;
    GemmBf16 inv(ctx, shipped);
    std::printf(
        "  invariant batched, 64-row: m=1 %8.1f us  m=64 %8.1f  m=256 %8.1f  m=4096 %9.1f\n",
        time_rows(inv, 1), time_rows(inv, 64), time_rows(inv, 256), time_rows(inv, kRows));
    CK(gemm.run(shape(kRows), x, w, y_ref));
    CK(cudaStreamSynchronize(st));
    default_bits = class_of(bytes_hash(y_ref, kRows));
    CK(inv.run(shape(kRows), x, w, y_ref));
    CK(cudaStreamSynchronize(st));
    std::printf("  default route at 4096 rows: %s; invariant batched: %s\n", default_bits.c_str(),
                class_of(bytes_hash(y_ref, kRows)).c_str());
  }

  // (first row, rows) of each call checked against gemm's 4096-row call: "inv" or the first
  // call that differs.
  auto row_checks = [&](GemmBf16& gemm) {
    const int checks[][2] = {{0, 1}, {77, 1}, {64, 64}, {128, 256}, {5, 300}, {3, 1000}};
    for (const auto& check : checks) {
      const int first = check[0];
      const int m = check[1];
      CK(cudaMemsetAsync(y, 0, size_t(kRows) * row_bytes, st));
      CK(gemm.run(shape(m), x + size_t(first) * s.k, w, y + size_t(first) * s.n));
      CK(cudaStreamSynchronize(st));
      std::vector<char> got(size_t(m) * row_bytes);
      std::vector<char> want(size_t(m) * row_bytes);
      CK(cudaMemcpy(got.data(), y + size_t(first) * s.n, got.size(), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(want.data(), y_ref + size_t(first) * s.n, want.size(), cudaMemcpyDeviceToHost));
      if (got != want) {
        return "DIFFERS at m=" + std::to_string(m) + " from row " + std::to_string(first);
      }
    }
    return std::string("inv");
  };
  {
    GemmBf16Options options;
    options.batch_invariant = true;
    options.invariant_form = GemmBf16Options::InvariantForm::kUnsplit;
    GemmBf16 gemm(ctx, options);
    CK(gemm.run(shape(kRows), x, w, y_ref));
    CK(cudaStreamSynchronize(st));
    const std::string bits = class_of(bytes_hash(y_ref, kRows));
    const std::string verdict = row_checks(gemm);
    std::printf("  unsplit %s %s: m=1 %8.1f us  m=64 %8.1f  m=256 %8.1f  m=4096 %9.1f\n",
                bits.c_str(), verdict.c_str(), time_rows(gemm, 1), time_rows(gemm, 64),
                time_rows(gemm, 256), time_rows(gemm, kRows));
    for (int m : {1, 64, 256, kRows}) {
      auto described = gemm.describe(shape(m));
      std::printf("    m=%d [%s]\n", m,
                  described.ok() ? described->c_str() : described.status().to_string().c_str());
    }
  }
  for (int p : plan_rows) {
    GemmBf16Options options;
    options.batch_invariant = true;
    options.invariant_form = GemmBf16Options::InvariantForm::kSingle;
    options.invariant_plan_rows = p;
    GemmBf16 gemm(ctx, options);
    auto counted = gemm.candidates(shape(p));
    if (!counted.ok()) {
      std::printf("  plan %d: %s\n", p, counted.status().to_string().c_str());
      continue;
    }
    for (int c = 0; c < *counted; ++c) {
      try {
        CK(gemm.choose(shape(p), c));
        auto described = gemm.describe(shape(p));
        const std::string desc = described.ok() ? *described : described.status().to_string();
        CK(gemm.run(shape(kRows), x, w, y_ref));
        CK(cudaStreamSynchronize(st));
        const std::string bits = class_of(bytes_hash(y_ref, kRows));
        const std::string verdict = row_checks(gemm);
        std::printf(
            "  plan %4d cand %d [%s] %s %s: m=1 %8.1f us  m=64 %8.1f  m=256 %8.1f  m=4096 %9.1f\n",
            p, c, desc.c_str(), bits.c_str(), verdict.c_str(), time_rows(gemm, 1),
            time_rows(gemm, 64), time_rows(gemm, 256), time_rows(gemm, kRows));
      } catch (const std::exception& e) {
        std::printf("  plan %4d cand %d ERROR %s\n", p, c, e.what());
      }
    }
  }
  cudaFree(x);
  cudaFree(y_ref);
  cudaFree(y);
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  using namespace hearth::cuda;
  using namespace hearth::cuda::dev;
  return run_reported("lab_invariant_gemm", [](DeviceContext& ctx) {
    std::printf("copy ceiling %.3f TB/s\n", measure_copy_bandwidth(ctx.stream()) / 1e12);
    const std::vector<int> plan_rows = plan_rows_from_env();
    for_each_llama8b_shape([&](const WeightShape& s) { sweep(ctx, s, plan_rows); });
  });
}
