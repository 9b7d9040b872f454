// The bf16 dot-product prefill path (kernels/cpu/bf16_dot.h) against two oracles written
// here: (1) the same math in double on activations rounded to bf16 by f32_to_bf16 (must
// agree to f32 accumulation error), (2) ref::linear on f32 activations, within the bound
// that rounding each activation to bf16 allows: sum |w * x| * 2^-8.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"

namespace hearth::kernels {
namespace {

struct Case {
  int64_t rows, cols, m;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "r%lld_k%lld_m%lld", static_cast<long long>(info.param.rows),
                static_cast<long long>(info.param.cols), static_cast<long long>(info.param.m));
  return buf;
}

class Bf16DotTest : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16DotTest, MatchesRoundedOracleAndRefWithinBound) {
  if (!cpu::bf16_dot_available()) GTEST_SKIP() << "no AVX512-BF16 in this build or CPU";
  const Case c = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(c.rows * 7919 + c.cols * 31 + c.m));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> wb(static_cast<std::size_t>(c.rows * c.cols));
  for (auto& v : wb) v = f32_to_bf16(d(rng) * 0.05f);
  std::vector<float> x(static_cast<std::size_t>(c.m * c.cols));
  for (auto& v : x) v = d(rng);
  const WeightMatrix w{DType::kBF16, c.rows, c.cols, wb.data()};

  std::vector<float> want(static_cast<std::size_t>(c.m * c.rows));
  ref::linear(w, x.data(), c.m, want.data());
  cpu::CpuContext ctx(2);
  ctx.bf16_dot = true;
  std::vector<float> got(want.size(), NAN);
  cpu::linear(ctx, w, x.data(), c.m, got.data());

  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t r = 0; r < c.rows; ++r) {
      double exact = 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double wv = bf16_to_f32(wb[r * c.cols + k]);
        const double xv = x[i * c.cols + k];
        // Batches of at most 4 rows stay on the f32 mat-vec path.
        const double xr =
            c.m <= cpu::kMatVecMaxRows ? xv : bf16_to_f32(f32_to_bf16(x[i * c.cols + k]));
        exact += wv * xr;
        mag += std::fabs(wv * xv);
      }
      const float g = got[i * c.rows + r];
      ASSERT_NEAR(g, exact, 1e-5 * mag + 1e-6) << "row " << i << " out " << r;
      ASSERT_NEAR(g, want[i * c.rows + r], mag * std::ldexp(1.0, -8) + 1e-5)
          << "row " << i << " out " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16DotTest,
                         ::testing::Values(Case{1, 1, 5}, Case{7, 31, 5}, Case{13, 33, 7},
                                           Case{37, 100, 13}, Case{64, 64, 6}, Case{33, 257, 17},
                                           Case{130, 512, 32}, Case{5, 2048, 9}, Case{9, 47, 3}),
                         case_name);

TEST(Bf16Dot, WideInputOnThreeThreads) {
  // 4160 columns, a partial 32-row activation tile and weight rows split over three threads.
  if (!cpu::bf16_dot_available()) GTEST_SKIP() << "no AVX512-BF16 here";
  const int64_t rows = 100, cols = 4160, m = 37;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> wb(static_cast<std::size_t>(rows * cols));
  for (auto& v : wb) v = f32_to_bf16(d(rng) * 0.05f);
  std::vector<float> x(static_cast<std::size_t>(m * cols));
  for (auto& v : x) v = d(rng);
  const WeightMatrix w{DType::kBF16, rows, cols, wb.data()};
  cpu::CpuContext ctx(3);
  std::vector<float> got(static_cast<std::size_t>(m * rows), NAN);
  ASSERT_TRUE(cpu::bf16_linear(ctx, w, x.data(), m, got.data()));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0.0, mag = 0.0;
      for (int64_t k = 0; k < cols; ++k) {
        const double p = static_cast<double>(bf16_to_f32(wb[r * cols + k])) *
                         bf16_to_f32(f32_to_bf16(x[i * cols + k]));
        exact += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(got[i * rows + r], exact, 1e-5 * mag + 1e-6) << "row " << i << " out " << r;
    }
  }
}

TEST(Bf16Dot, OffLeavesF32Compute) {
  // Without the option, prefill of bf16 weights is the f32 path: exact against ref within
  // f32 accumulation error, tighter than bf16 activation rounding allows.
  const int64_t rows = 19, cols = 300, m = 11;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> wb(static_cast<std::size_t>(rows * cols));
  for (auto& v : wb) v = f32_to_bf16(d(rng));
  std::vector<float> x(static_cast<std::size_t>(m * cols));
  for (auto& v : x) v = d(rng);
  const WeightMatrix w{DType::kBF16, rows, cols, wb.data()};
  std::vector<float> want(static_cast<std::size_t>(m * rows)), got(want.size());
  ref::linear(w, x.data(), m, want.data());
  cpu::CpuContext ctx(2);
  cpu::linear(ctx, w, x.data(), m, got.data());
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-3f) << i;
}

TEST(Bf16Dot, OtherDtypesDecline) {
  std::vector<float> wf(4 * 8, 1.0f), x(8, 1.0f), y(4, 0.0f);
  cpu::CpuContext ctx(1);
  EXPECT_FALSE(
      cpu::bf16_linear(ctx, WeightMatrix{DType::kF32, 4, 8, wf.data()}, x.data(), 1, y.data()));
  EXPECT_FALSE(cpu::bf16_dot_supported(WeightMatrix{DType::kF16, 4, 8, wf.data()}));
}

}  // namespace
}  // namespace hearth::kernels
