// Lab: in what order does cuBLASLt's unsplit bf16 GEMM sum a row (issue 6, batch invariance)?
// Session 23 found every cuBLASLt algorithm that does not split k gives a row the same bytes
// at any tile and row count (lab_invariant_gemm). If those bytes are one chain of tensor-core
// k16 steps in k order, a GEMV built on mma.sync that walks k the same way gives the same
// bytes too, and --batch-invariant could keep a GEMV-rate path for batch-1 decode (today a
// 64-row-class tile, 0.84x of off).
// Each variant below computes y[m, n] = x[m, k] · w[n, k]ᵀ in f32 with mma.sync m16n8k16 (a
// warp per 16 rows of w and 8 rows of x) and a k order of its own; each is compared bit for
// bit with GemmBf16's invariant (unsplit) route and with its default route, f32 output:
//   chain      one accumulator, k16 steps in order;
//   chain2     two accumulators over alternate k16 steps, added at the end;
//   chain4     four, likewise;
//   block32    each 32 columns of k summed from zero, then added to the total;
//   block64    each 64 likewise.
// Prints, per shape and m, the share of equal bits and the largest difference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;

enum class Order { kChain, kChain2, kChain4, kBlock32, kBlock64 };

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t word(const Bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// A warp: w rows [n0, n0 + 16) (mma's M), x rows [m0, m0 + 8) (mma's N; x holds a multiple
// of 8 rows, the padding zero). y: [m, n] f32.
template <Order kOrder>
__global__ void mma_gemv(const Bf16* x, const Bf16* w, float* y, int m, int n, int k) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int n0 = warp * 16;
  const int m0 = blockIdx.y * 8;
  if (n0 >= n) return;
  const int g = lane / 4;
  const int t = lane % 4;
  const Bf16* w0 = w + static_cast<int64_t>(n0 + g) * k + 2 * t;
  const Bf16* w8 = w0 + static_cast<int64_t>(8) * k;
  const Bf16* xr = x + static_cast<int64_t>(m0 + g) * k + 2 * t;
  constexpr int kChains = kOrder == Order::kChain2 ? 2 : kOrder == Order::kChain4 ? 4 : 1;
  constexpr int kBlockSteps = kOrder == Order::kBlock32 ? 2 : kOrder == Order::kBlock64 ? 4 : 0;
  float acc[kChains][4] = {};
  float block[4] = {};
  for (int s = 0; s < k / 16; ++s) {
    const int c = s * 16;
    const uint32_t a[4] = {word(w0 + c), word(w8 + c), word(w0 + c + 8), word(w8 + c + 8)};
    const uint32_t b[2] = {word(xr + c), word(xr + c + 8)};
    if constexpr (kBlockSteps > 0) {
      mma(block, a, b);
      if (s % kBlockSteps == kBlockSteps - 1) {
        for (int i = 0; i < 4; ++i) {
          acc[0][i] += block[i];
          block[i] = 0.0f;
        }
      }
    } else {
      mma(acc[s % kChains], a, b);
    }
  }
  float out[4];
  for (int i = 0; i < 4; ++i) {
    out[i] = acc[0][i];
    for (int j = 1; j < kChains; ++j) out[i] += acc[j][i];
  }
  // c0, c1: row g of the tile (w row n0 + g), columns 2t, 2t + 1 (x rows m0 + 2t, + 1);
  // c2, c3: w row n0 + g + 8.
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + 2 * t + (i & 1);
    const int col = n0 + g + (i >= 2 ? 8 : 0);
    if (row < m) y[static_cast<int64_t>(row) * n + col] = out[i];
  }
}

using Launch = void (*)(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                        cudaStream_t st);
template <Order kOrder>
void launch(const Bf16* x, const Bf16* w, float* y, int m, int n, int k, cudaStream_t st) {
  const int warps = n / 16;
  dim3 grid((warps + 3) / 4, (m + 7) / 8);
  mma_gemv<kOrder><<<grid, 128, 0, st>>>(x, w, y, m, n, k);
  CK(cudaGetLastError());
}
struct Variant {
  const char* name;
  Launch launch;
};
constexpr Variant kVariants[] = {{"chain", launch<Order::kChain>},
                                 {"chain2", launch<Order::kChain2>},
                                 {"chain4", launch<Order::kChain4>},
                                 {"block32", launch<Order::kBlock32>},
                                 {"block64", launch<Order::kBlock64>}};

// "equal a/b bits, max |diff| d" of two f32 arrays.
void compare(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  size_t equal = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++equal;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  std::printf("    %-28s equal bits %zu / %zu (%.2f %%), max |diff| %.3g\n", what, equal,
              want.size(), 100.0 * equal / want.size(), worst);
}

void shape(DeviceContext& ctx, int n, int k) {
  cudaStream_t st = ctx.stream();
  constexpr int kMaxM = 64;
  Bf16* w = nullptr;
  Bf16* x = nullptr;
  float* y = nullptr;
  CK(cudaMalloc(&w, size_t(n) * k * 2));
  CK(cudaMalloc(&x, size_t(kMaxM) * k * 2));
  CK(cudaMalloc(&y, size_t(kMaxM) * n * 4));
  CK(fill_random_bf16(w, size_t(n) * k, 11 + n, 0.05f, st));
  GemmBf16Options invariant_options;
  invariant_options.batch_invariant = true;  // the unsplit form
  GemmBf16 invariant(ctx, invariant_options);
  GemmBf16 plain(ctx, GemmBf16Options{});
  std::printf("\n== w %dx%d\n", n, k);
  for (int m : {1, 8, 64}) {
    CK(cudaMemsetAsync(x, 0, size_t(kMaxM) * k * 2, st));
    CK(fill_random_bf16(x, size_t(m) * k, 5 + m, 1.0f, st));
    const GemmShape g{m, n, k, k, k, n, GemmOut::kF32, false};
    auto result = [&](auto&& fn) {
      CK(cudaMemsetAsync(y, 0xff, size_t(kMaxM) * n * 4, st));
      fn();
      CK(cudaStreamSynchronize(st));
      return to_host_f32(y, size_t(m) * n);
    };
    const std::vector<float> unsplit = result([&] { CK(invariant.run(g, x, w, y)); });
    const std::vector<float> route = result([&] { CK(plain.run(g, x, w, y)); });
    std::printf("  m=%d\n", m);
    compare("default route vs unsplit", route, unsplit);
    for (const Variant& v : kVariants) {
      const std::vector<float> mine = result([&] { v.launch(x, w, y, m, n, k, st); });
      compare((std::string(v.name) + " vs unsplit").c_str(), mine, unsplit);
    }
  }
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  using namespace hearth::cuda;
  using namespace hearth::cuda::dev;
  return run_reported("lab_mma_order", [](DeviceContext& ctx) {
    for_each_llama8b_shape([&](const WeightShape& s) { shape(ctx, s.n, s.k); });
    shape(ctx, 256, 512);  // a small shape: cuBLASLt's picks differ there
  });
}
