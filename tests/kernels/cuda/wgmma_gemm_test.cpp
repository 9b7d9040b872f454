// The Hopper wgmma GEMM (gemm_wgmma.cuh) against a float64 product of the same bf16 inputs:
// every token width (16/32/64/128), ragged m, n and k tails (k not a multiple of the 64-wide
// step), padded strides, f32 and accumulate outputs, and grids that split tiles between
// blocks in every way (a tile in one block, a block inside one tile, a block over several
// tiles) — split tiles are summed in k order, so a second run gives the same bits. Skipped
// on devices other than sm_90.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemm_wgmma.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

struct WgmmaCase {
  int m, n, k, pad_x, pad_w, pad_y;
  bool f32, accumulate;
  int grid;     // 0: the plan's
  int cluster;  // 0: the plan's; 1: stream-K; 2, 4, 8: clusters
};

class WgmmaGemmTest : public CudaTest, public ::testing::WithParamInterface<WgmmaCase> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (ctx_ != nullptr && ctx_->properties().major != 9) GTEST_SKIP() << "not an sm_90 device";
  }
};

// Tolerance as GemmTest's: f32 outputs 1e-4 relative, bf16 outputs one rounding (4e-3).
TEST_P(WgmmaGemmTest, MatchesFloat64Reference) {
  const WgmmaCase c = GetParam();
  const GemmProblem p = gemm_problem(c.m, c.n, c.k, c.pad_x, c.pad_w, c.pad_y, c.accumulate, 11);
  DeviceBuffer dx = upload(to_bf16(p.x));
  DeviceBuffer dw = upload(to_bf16(p.w));
  DeviceBuffer dy = c.f32 ? upload(p.y0) : upload(to_bf16(p.y0));

  WgmmaGemmArgs args;
  args.x = dx.as<__nv_bfloat16>();
  args.ldx = p.ldx;
  args.w = dw.as<__nv_bfloat16>();
  args.ldw = p.ldw;
  args.y = dy.data();
  args.ldy = p.ldy;
  args.y_f32 = c.f32;
  args.accumulate = c.accumulate;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.sm_count = sm_count();
  args.grid = c.grid;
  args.cluster = c.cluster;
  args.pdl = true;
  ASSERT_TRUE(wgmma_gemm_supported(args, 9));
  const WgmmaGemmPlan plan = wgmma_gemm_plan(args);
  auto partials = ctx_->allocate(std::max<size_t>(plan.partial_floats, 1) * 4, "partials");
  auto counters = ctx_->allocate(std::max(plan.counters, 1) * 4, "counters");
  ASSERT_TRUE(partials.ok() && counters.ok());
  ASSERT_EQ(cudaMemsetAsync(counters->data(), 0, std::max(plan.counters, 1) * 4, ctx_->stream()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(ctx_->stream()), cudaSuccess);
  args.partials = partials->as<float>();
  args.counters = counters->as<unsigned>();
  ASSERT_EQ(wgmma_gemm(args, ctx_->stream()), cudaSuccess);

  std::vector<float> y;
  if (c.f32) {
    y = download<float>(dy, p.y0.size());
  } else {
    y = from_bf16(download<__nv_bfloat16>(dy, p.y0.size()));
  }
  const std::vector<float> got = packed_rows(y, c.m, c.n, p.ldy);  // [m, n]
  EXPECT_LT(relative_error(got, p.ref), c.f32 ? 1e-4 : 4e-3);
  if (c.pad_y > 0) {
    EXPECT_EQ(y[c.n], p.y0[c.n]);  // the padding between rows is untouched
  }
  // A second run (the arrival counters were left at zero) gives the same bits.
  if (!c.accumulate && !c.f32) {
    DeviceBuffer again = poisoned<__nv_bfloat16>(p.y0.size());
    args.y = again.data();
    ASSERT_EQ(wgmma_gemm(args, ctx_->stream()), cudaSuccess);
    auto y2 = from_bf16(download<__nv_bfloat16>(again, p.y0.size()));
    const std::vector<float> again_rows = packed_rows(y2, c.m, c.n, p.ldy);
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(again_rows[k], got[k]) << k / c.n << " " << k % c.n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WgmmaGemmTest,
    ::testing::Values(WgmmaCase{16, 256, 512, 0, 0, 0, false, false, 0, 0},
                      WgmmaCase{37, 777, 1000, 8, 16, 3, false, false, 0, 0},
                      WgmmaCase{5, 300, 136, 0, 8, 0, false, true, 0, 0},
                      WgmmaCase{64, 1024, 4096, 0, 0, 0, false, false, 0, 0},
                      WgmmaCase{64, 1024, 4096, 0, 0, 0, false, false, 5, 0},
                      WgmmaCase{100, 513, 2056, 8, 0, 5, true, true, 0, 0},
                      WgmmaCase{128, 640, 512, 0, 0, 0, true, false, 0, 0},
                      WgmmaCase{1, 64, 64, 0, 0, 0, false, false, 0, 0},
                      WgmmaCase{33, 1000, 1024, 0, 0, 0, false, false, 7, 0},
                      WgmmaCase{127, 4096, 1024, 0, 0, 0, false, true, 0, 0},
                      WgmmaCase{20, 2048, 8, 0, 0, 0, false, false, 0, 0},
                      WgmmaCase{70, 600, 1032, 0, 8, 0, false, false, 1, 0},
                      WgmmaCase{9, 1300, 512, 0, 0, 0, true, true, 3, 0},
                      // the plan's cluster form (qkv: 48 tiles x 2; down: 32 x 4) and stream-K
                      WgmmaCase{64, 6144, 4096, 0, 0, 0, false, false, 0, 0},
                      WgmmaCase{64, 6144, 4096, 0, 0, 0, false, false, 0, 1},
                      WgmmaCase{32, 4096, 14336, 0, 0, 0, false, true, 0, 0},
                      // forced clusters on ragged shapes, f32 and accumulate outputs
                      WgmmaCase{37, 777, 1000, 8, 16, 3, false, false, 0, 2},
                      WgmmaCase{100, 513, 2056, 8, 0, 5, true, true, 0, 4},
                      WgmmaCase{5, 300, 136, 0, 8, 0, false, true, 0, 2},
                      WgmmaCase{16, 256, 1024, 0, 0, 0, false, false, 0, 8}));

// GemmBf16 with the wgmma route against GemmBf16 on cuBLASLt and a float64 product:
// routed rows, partials in the context's workspace, f32 + accumulate.
TEST_F(CudaTest, GemmBf16WgmmaRouteMatchesCublas) {
  if (ctx_->properties().major != 9) GTEST_SKIP() << "not an sm_90 device";
  GemmBf16Options on;
  on.wgmma = true;
  GemmBf16Options off;
  off.wgmma = false;
  GemmBf16 routed(*ctx_, on);
  GemmBf16 cublas(*ctx_, off);
  for (int m : {3, 16, 64, 100, 128}) {
    for (int mode = 0; mode < 2; ++mode) {
      const bool f32 = mode == 1;
      const int n = 1000;
      const int k = 1024;
      ASSERT_TRUE(wgmma_gemm_routed(m));
      auto x = random_bf16_values(size_t(m) * k, 21);
      auto w = random_bf16_values(size_t(n) * k, 22, 0.05f);
      auto y0 = random_bf16_values(size_t(m) * n, 23);
      const std::vector<double> ref = reference_gemm(x, k, w, k, m, n, k, f32 ? &y0 : nullptr, n);
      DeviceBuffer dx = upload(to_bf16(x));
      DeviceBuffer dw = upload(to_bf16(w));
      GemmShape shape{m, n, k, k, k, n, f32 ? GemmOut::kF32 : GemmOut::kBf16, f32};
      std::vector<float> got[2];
      for (int which = 0; which < 2; ++which) {
        GemmBf16& gemm = which == 0 ? routed : cublas;
        DeviceBuffer dy = f32 ? upload(y0) : poisoned<__nv_bfloat16>(y0.size());
        ASSERT_TRUE(
            gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dy.data()).ok());
        got[which] = f32 ? download<float>(dy, y0.size())
                         : from_bf16(download<__nv_bfloat16>(dy, y0.size()));
      }
      EXPECT_LT(relative_error(got[0], ref), f32 ? 1e-4 : 4e-3) << "m=" << m;
      EXPECT_LT(relative_error(got[1], ref), f32 ? 1e-4 : 4e-3) << "m=" << m;
      // Against cuBLASLt: at most one bf16 rounding apart (f32: summation order only).
      for (size_t i = 0; i < ref.size(); ++i) {
        const double tol = (f32 ? 1e-5 : 1.0 / 128) * std::fabs(got[1][i]) + (f32 ? 1e-4 : 1e-3);
        ASSERT_LE(std::fabs(got[0][i] - got[1][i]), tol) << "m=" << m << " at " << i;
      }
    }
  }
}

TEST(WgmmaGemmSupportTest, RejectsUnsupportedCalls) {
  // Never dereferenced: the check reads only the addresses.
  auto* buf = reinterpret_cast<__nv_bfloat16*>(uintptr_t{4096});
  WgmmaGemmArgs args;
  args.x = buf;
  args.w = buf;
  args.y = buf;
  args.m = 4;
  args.n = 8;
  args.k = 16;
  args.ldx = 16;
  args.ldw = 16;
  args.ldy = 8;
  args.sm_count = 132;
  EXPECT_TRUE(wgmma_gemm_supported(args, 9));
  EXPECT_FALSE(wgmma_gemm_supported(args, 8));   // Ampere
  EXPECT_FALSE(wgmma_gemm_supported(args, 10));  // Blackwell has no wgmma
  args.k = 12;                                   // not a multiple of 8
  args.ldx = 12;
  args.ldw = 12;
  EXPECT_FALSE(wgmma_gemm_supported(args, 9));
  args.k = 16;
  args.ldx = 16;
  args.ldw = 16;
  args.x = buf + 1;  // misaligned
  EXPECT_FALSE(wgmma_gemm_supported(args, 9));
  args.x = buf;
  args.m = kWgmmaMaxRows + 1;
  EXPECT_FALSE(wgmma_gemm_supported(args, 9));
  args.m = 4;
  // The plan: tokens rounded to the instruction's N, 128-row tiles, 64-wide k steps.
  args.n = 300;
  args.k = 136;
  args.ldx = 136;
  args.ldw = 136;
  const WgmmaGemmPlan plan = wgmma_gemm_plan(args);
  EXPECT_EQ(plan.tokens, 16);
  EXPECT_EQ(plan.tiles, 3);
  EXPECT_EQ(plan.ksteps, 3);
  EXPECT_EQ(plan.grid, 9);  // never more blocks than iterations
  EXPECT_EQ(plan.counters, 3);
  EXPECT_EQ(plan.cluster, 1);
  // The 8B's shapes at 64 rows on 132 multiprocessors: clusters where tiles are fewer.
  args.m = 64;
  args.k = 4096;
  args.ldx = args.ldw = 4096;
  args.n = 6144;
  args.ldy = 6144;
  EXPECT_EQ(wgmma_gemm_plan(args).cluster, 2);
  EXPECT_EQ(wgmma_gemm_plan(args).grid, 96);
  args.n = 28672;
  args.ldy = 28672;
  EXPECT_EQ(wgmma_gemm_plan(args).cluster, 1);
  EXPECT_EQ(wgmma_gemm_plan(args).grid, 112);
  args.n = 4096;
  args.ldy = 4096;
  args.k = 14336;
  args.ldx = args.ldw = 14336;
  EXPECT_EQ(wgmma_gemm_plan(args).cluster, 4);
  EXPECT_EQ(wgmma_gemm_plan(args).grid, 128);
}

}  // namespace
}  // namespace hearth::cuda::testing
