// DeviceContext's budgeted allocator and the cuBLASLt bf16 GEMM against a float64 product
// of the same bf16 inputs.
#include "kernels/cuda/gemm_bf16.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

TEST(DeviceContextTest, BudgetIsEnforcedAndAccounted) {
  DeviceContextOptions options;
  options.memory_budget = size_t{8} << 20;
  options.workspace_bytes = size_t{1} << 20;
  auto ctx = DeviceContext::create(options);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ((*ctx)->used(), size_t{1} << 20);
  {
    auto a = (*ctx)->allocate(size_t{4} << 20, "a");
    ASSERT_TRUE(a.ok());
    auto b = (*ctx)->allocate(size_t{4} << 20, "weights of layer 3");
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(b.status().message().find("weights of layer 3"), std::string::npos);
    EXPECT_EQ((*ctx)->used(), size_t{5} << 20);
  }
  EXPECT_EQ((*ctx)->used(), size_t{1} << 20);
  EXPECT_EQ((*ctx)->peak(), size_t{5} << 20);
}

TEST(DeviceContextTest, MissingDeviceIsAnError) {
  DeviceContextOptions options;
  options.device = 4096;
  auto ctx = DeviceContext::create(options);
  EXPECT_FALSE(ctx.ok());
}

struct GemmCase {
  int m, n, k, pad_x, pad_w, pad_y;
  GemmOut out;
  bool accumulate;
};

class GemmTest : public CudaTest, public ::testing::WithParamInterface<GemmCase> {};

// Tolerance: f32 output accumulates in f32 over k <= 5125 terms (error ~ sqrt(k) * 2^-24,
// far under 1e-4); bf16 output adds one rounding to 8 bits (2^-9 relative, ~1.2e-3 RMS),
// so 4e-3.
TEST_P(GemmTest, MatchesFloat64Reference) {
  const GemmCase c = GetParam();
  int64_t ldx = c.k + c.pad_x;
  int64_t ldw = c.k + c.pad_w;
  int64_t ldy = c.n + c.pad_y;
  auto x = random_bf16_values(c.m * ldx, 1);
  auto w = random_bf16_values(c.n * ldw, 2, 0.05f);
  auto y0 = random_bf16_values(c.m * ldy, 3);
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
  GemmBf16 gemm(*ctx_);
  GemmShape shape{c.m, c.n, c.k, ldx, ldw, ldy, c.out, c.accumulate};
  std::vector<float> got(ref.size());
  if (c.out == GemmOut::kF32) {
    DeviceBuffer dy = upload(y0);
    ASSERT_TRUE(gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dy.data()).ok());
    auto y = download<float>(dy, y0.size());
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) got[i * c.n + j] = y[i * ldy + j];
    }
    EXPECT_LT(relative_error(got, ref), 1e-4);
  } else {
    DeviceBuffer dy = upload(to_bf16(y0));
    ASSERT_TRUE(gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dy.data()).ok());
    auto y = from_bf16(download<__nv_bfloat16>(dy, y0.size()));
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) got[i * c.n + j] = y[i * ldy + j];
    }
    EXPECT_LT(relative_error(got, ref), 4e-3);
    // The padding between rows is untouched.
    if (c.pad_y > 0) {
      EXPECT_EQ(y[c.n], y0[c.n]);
    }
  }
  // A second run reuses the cached plan and gives the same bits.
  if (!c.accumulate && c.out == GemmOut::kBf16) {
    DeviceBuffer again = poisoned<__nv_bfloat16>(y0.size());
    ASSERT_TRUE(gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), again.data()).ok());
    auto y2 = from_bf16(download<__nv_bfloat16>(again, y0.size()));
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.n; ++j) {
        ASSERT_EQ(y2[i * ldy + j], got[i * c.n + j]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest,
                         ::testing::Values(GemmCase{1, 769, 5125, 0, 0, 0, GemmOut::kBf16, false},
                                           GemmCase{7, 769, 512, 8, 16, 8, GemmOut::kBf16, false},
                                           GemmCase{129, 5125, 256, 0, 0, 3, GemmOut::kF32, false},
                                           GemmCase{33, 1024, 769, 5, 0, 0, GemmOut::kBf16, true},
                                           GemmCase{2, 5125, 1024, 0, 0, 0, GemmOut::kF32, true},
                                           // m <= 4 with k, ld multiples of 8: the gemv_bf16 path
                                           GemmCase{1, 769, 4096, 8, 8, 3, GemmOut::kBf16, false},
                                           GemmCase{1, 5125, 1024, 0, 0, 0, GemmOut::kF32, false},
                                           GemmCase{3, 1024, 2048, 8, 0, 1, GemmOut::kBf16, true},
                                           GemmCase{4, 769, 5120, 0, 0, 0, GemmOut::kBf16, false}));

TEST_F(CudaTest, GemmRejectsBadShapes) {
  GemmBf16 gemm(*ctx_);
  GemmShape shape{4, 8, 16, 8, 16, 8, GemmOut::kBf16, false};
  EXPECT_EQ(gemm.run(shape, nullptr, nullptr, nullptr).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace hearth::cuda::testing
