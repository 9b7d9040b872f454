// The skinny bf16 GEMM (gemm_skinny.cuh) against a float64 product of the same bf16 inputs:
// ragged m, n and k tails, padded strides, f32 and accumulate outputs, every tile width and
// occupancy, split-K (deterministic: a second run gives the same bits) and a small grid that
// loops over many units.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemm_skinny.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

struct SkinnyCase {
  int m, n, k, pad_x, pad_w, pad_y;
  bool f32, accumulate;
  int bn, occupancy, splits, grid;
};

class SkinnyGemmTest : public CudaTest, public ::testing::WithParamInterface<SkinnyCase> {};

// Tolerance as GemmTest's: f32 outputs 1e-4 relative, bf16 outputs one rounding (4e-3).
TEST_P(SkinnyGemmTest, MatchesFloat64Reference) {
  const SkinnyCase c = GetParam();
  const int64_t ldx = c.k + c.pad_x;
  const int64_t ldw = c.k + c.pad_w;
  const int64_t ldy = c.n + c.pad_y;
  auto x = random_bf16_values(c.m * ldx, 11);
  auto w = random_bf16_values(c.n * ldw, 12, 0.05f);
  auto y0 = random_bf16_values(c.m * ldy, 13);
  std::vector<double> ref(static_cast<size_t>(c.m) * c.n);
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double acc = c.accumulate ? y0[i * ldy + j] : 0.0;
      for (int p = 0; p < c.k; ++p) acc += static_cast<double>(x[i * ldx + p]) * w[j * ldw + p];
      ref[i * c.n + j] = acc;
    }
  }
  DeviceBuffer dx = upload(to_bf16(x));
  DeviceBuffer dw = upload(to_bf16(w));
  DeviceBuffer dy = c.f32 ? upload(y0) : upload(to_bf16(y0));

  SkinnyGemmArgs args;
  args.x = dx.as<__nv_bfloat16>();
  args.ldx = ldx;
  args.w = dw.as<__nv_bfloat16>();
  args.ldw = ldw;
  args.y = dy.data();
  args.ldy = ldy;
  args.y_f32 = c.f32;
  args.accumulate = c.accumulate;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.sm_count = sm_count();
  args.bn = c.bn;
  args.occupancy = c.occupancy;
  args.splits = c.splits;
  args.grid = c.grid;
  ASSERT_TRUE(skinny_gemm_supported(args));
  const SkinnyGemmPlan plan = skinny_gemm_plan(args);
  if (c.splits > 0) {
    EXPECT_EQ(plan.splits, c.splits);
  }
  auto partials = ctx_->allocate(std::max<size_t>(plan.partial_floats, 1) * 4, "partials");
  auto counters = ctx_->allocate(std::max(plan.counters, 1) * 4, "counters");
  ASSERT_TRUE(partials.ok() && counters.ok());
  ASSERT_EQ(cudaMemsetAsync(counters->data(), 0, std::max(plan.counters, 1) * 4, ctx_->stream()),
            cudaSuccess);
  args.partials = partials->as<float>();
  args.counters = counters->as<unsigned>();
  ASSERT_EQ(skinny_gemm(args, ctx_->stream()), cudaSuccess);

  std::vector<float> got(ref.size());
  std::vector<float> y;
  if (c.f32) {
    y = download<float>(dy, y0.size());
  } else {
    y = from_bf16(download<__nv_bfloat16>(dy, y0.size()));
  }
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) got[i * c.n + j] = y[i * ldy + j];
  }
  EXPECT_LT(relative_error(got, ref), c.f32 ? 1e-4 : 4e-3);
  if (c.pad_y > 0) {
    EXPECT_EQ(y[c.n], y0[c.n]);  // the padding between rows is untouched
  }
  // A second run (the split-K counters were left at zero) gives the same bits.
  if (!c.accumulate && !c.f32) {
    DeviceBuffer again = poisoned<__nv_bfloat16>(y0.size());
    args.y = again.data();
    ASSERT_EQ(skinny_gemm(args, ctx_->stream()), cudaSuccess);
    auto y2 = from_bf16(download<__nv_bfloat16>(again, y0.size()));
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) ASSERT_EQ(y2[i * ldy + j], got[i * c.n + j]) << i << " " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SkinnyGemmTest,
    ::testing::Values(SkinnyCase{16, 256, 512, 0, 0, 0, false, false, 0, 0, 0, 0},
                      SkinnyCase{37, 777, 1000, 8, 16, 3, false, false, 128, 1, 1, 0},
                      SkinnyCase{5, 300, 136, 0, 8, 0, false, true, 64, 2, 0, 0},
                      SkinnyCase{64, 1024, 4096, 0, 0, 0, false, false, 128, 1, 4, 0},
                      SkinnyCase{100, 513, 2056, 8, 0, 5, true, true, 64, 2, 3, 0},
                      SkinnyCase{128, 640, 512, 0, 0, 0, true, false, 128, 2, 1, 0},
                      SkinnyCase{200, 130, 264, 0, 0, 0, false, false, 128, 1, 2, 0},
                      SkinnyCase{1, 64, 64, 0, 0, 0, false, false, 0, 0, 0, 0},
                      SkinnyCase{33, 1000, 1024, 0, 0, 0, false, false, 64, 1, 2, 7},
                      SkinnyCase{127, 4096, 1024, 0, 0, 0, false, true, 128, 1, 0, 0},
                      SkinnyCase{20, 2048, 8, 0, 0, 0, false, false, 0, 0, 0, 0},
                      SkinnyCase{70, 600, 1032, 0, 8, 0, false, false, 256, 1, 2, 0},
                      SkinnyCase{9, 1300, 512, 0, 0, 0, true, true, 256, 1, 1, 3}));

// GemmBf16 with the skinny route against GemmBf16 on cuBLASLt and a float64 product:
// routed rows, split-K through the context's workspace, f32 + accumulate.
TEST_F(CudaTest, GemmBf16SkinnyRouteMatchesCublas) {
  GemmBf16Options on;
  on.skinny = true;
  GemmBf16Options off;
  off.skinny = false;
  GemmBf16 skinny(*ctx_, on);
  GemmBf16 cublas(*ctx_, off);
  for (int m : {3, 16, 64, 100, 128}) {
    for (int mode = 0; mode < 2; ++mode) {
      const bool f32 = mode == 1;
      const int n = 1000;
      const int k = 1024;
      ASSERT_TRUE(skinny_gemm_routed(m, n, k));
      auto x = random_bf16_values(size_t(m) * k, 21);
      auto w = random_bf16_values(size_t(n) * k, 22, 0.05f);
      auto y0 = random_bf16_values(size_t(m) * n, 23);
      std::vector<double> ref(size_t(m) * n);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double acc = f32 ? y0[i * n + j] : 0.0;
          for (int p = 0; p < k; ++p) acc += static_cast<double>(x[i * k + p]) * w[j * k + p];
          ref[i * n + j] = acc;
        }
      }
      DeviceBuffer dx = upload(to_bf16(x));
      DeviceBuffer dw = upload(to_bf16(w));
      GemmShape shape{m, n, k, k, k, n, f32 ? GemmOut::kF32 : GemmOut::kBf16, f32};
      std::vector<float> got[2];
      for (int which = 0; which < 2; ++which) {
        GemmBf16& gemm = which == 0 ? skinny : cublas;
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

TEST(SkinnyGemmSupportTest, RejectsUnsupportedShapes) {
  // Never dereferenced: the check reads only the addresses.
  auto* buf = reinterpret_cast<__nv_bfloat16*>(uintptr_t{4096});
  SkinnyGemmArgs args;
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
  EXPECT_TRUE(skinny_gemm_supported(args));
  args.k = 12;  // not a multiple of 8
  args.ldx = 12;
  args.ldw = 12;
  EXPECT_FALSE(skinny_gemm_supported(args));
  args.k = 16;
  args.ldx = 16;
  args.ldw = 16;
  args.x = buf + 1;  // misaligned
  EXPECT_FALSE(skinny_gemm_supported(args));
  args.x = buf;
  args.bn = 96;
  EXPECT_FALSE(skinny_gemm_supported(args));
}

}  // namespace
}  // namespace hearth::cuda::testing
