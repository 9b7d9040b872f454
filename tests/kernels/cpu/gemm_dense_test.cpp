// The dense prefill GEMM (kernels/cpu/gemm_dense.h) against a double-precision oracle on the
// weights as stored (f32, bf16, f16 converted exactly), over shapes that hit every tail:
// partial 14-row activation tiles, partial 32-row weight panels, column slices that are not
// a multiple of 16 or of the 256-column slice, several L2 activation blocks and weight-row
// blocks, one and three threads. Also through cpu::linear against ref::linear.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/same_bits.h"
#include "kernels/cpu/gemm_dense.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"

namespace hearth::kernels {
namespace {

struct Case {
  DType dtype;
  int64_t rows, cols, m;
  int threads;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* type = c.dtype == DType::kF32 ? "f32" : c.dtype == DType::kBF16 ? "bf16" : "f16";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s_r%lld_k%lld_m%lld_t%d", type, static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), static_cast<long long>(c.m), c.threads);
  return buf;
}

// A random [rows, cols] matrix stored as `dtype`, with its values as doubles.
struct Weights {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<double> exact;
  WeightMatrix w;
};

Weights make_weights(DType dtype, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 0.05f);
  Weights out;
  const auto n = static_cast<std::size_t>(rows * cols);
  out.exact.resize(n);
  if (dtype == DType::kF32) {
    out.f32.resize(n);
    for (std::size_t i = 0; i < n; ++i) out.exact[i] = out.f32[i] = d(rng);
    out.w = WeightMatrix{dtype, rows, cols, out.f32.data()};
  } else {
    out.half.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float v = d(rng);
      out.half[i] = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      out.exact[i] = dtype == DType::kBF16 ? bf16_to_f32(out.half[i]) : f16_to_f32(out.half[i]);
    }
    out.w = WeightMatrix{dtype, rows, cols, out.half.data()};
  }
  return out;
}

// n Normal(0, 1) activations.
std::vector<float> activations(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

class GemmDenseTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmDenseTest, MatchesDoubleOracle) {
  const Case c = GetParam();
  if (!cpu::dense_gemm_supported(WeightMatrix{c.dtype, 1, 1, nullptr})) {
    GTEST_SKIP() << "no AVX-512 in this build";
  }
  std::mt19937_64 rng(static_cast<uint64_t>(c.rows * 7919 + c.cols * 31 + c.m));
  const Weights wt = make_weights(c.dtype, c.rows, c.cols, rng);
  const std::vector<float> x = activations(c.m * c.cols, rng);

  cpu::CpuContext ctx(c.threads);
  std::vector<float> got(static_cast<std::size_t>(c.m * c.rows), NAN);
  ASSERT_TRUE(cpu::dense_gemm(ctx, wt.w, x.data(), c.m, got.data()));
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t r = 0; r < c.rows; ++r) {
      double exact = 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double p = wt.exact[r * c.cols + k] * x[i * c.cols + k];
        exact += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(got[i * c.rows + r], exact, 1e-5 * mag + 1e-6) << "row " << i << " out " << r;
    }
  }
}

TEST_P(GemmDenseTest, LinearMatchesRef) {
  const Case c = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(c.rows * 31 + c.cols * 7 + c.m));
  const Weights wt = make_weights(c.dtype, c.rows, c.cols, rng);
  const std::vector<float> x = activations(c.m * c.cols, rng);
  std::vector<float> want(static_cast<std::size_t>(c.m * c.rows));
  ref::linear(wt.w, x.data(), c.m, want.data());
  cpu::CpuContext ctx(c.threads);
  std::vector<float> got(want.size(), NAN);
  cpu::linear(ctx, wt.w, x.data(), c.m, got.data());
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << i;
  }
}

// dense_gemm_rows (the batch-invariant route for 1-15 rows) gives each activation row the
// bits dense_gemm gives it in a call of max(m, 16) + 3 rows: rows [0, m) of the same x, every
// weight dtype and tail, one and three threads, from the row-major matrix and from its
// 16-row-interleaved copy (which a row gather reads back exactly); and cpu::linear under
// batch invariance gives a row the same bits alone and inside a batch of 16+ rows.
TEST_P(GemmDenseTest, RowsMatchTheGemmBitForBit) {
  const Case c = GetParam();
  if (!cpu::dense_gemm_supported(WeightMatrix{c.dtype, 1, 1, nullptr})) {
    GTEST_SKIP() << "no AVX-512 in this build";
  }
  std::mt19937_64 rng(static_cast<uint64_t>(c.rows * 131 + c.cols * 17 + c.m));
  const Weights wt = make_weights(c.dtype, c.rows, c.cols, rng);
  const int64_t m = std::min(c.m, cpu::kDenseRowsMax);
  const int64_t big = std::max<int64_t>(m, 16) + 3;
  const std::vector<float> x = activations(big * c.cols, rng);
  cpu::CpuContext ctx(c.threads);
  std::vector<float> whole(static_cast<std::size_t>(big * c.rows), NAN);
  ASSERT_TRUE(cpu::dense_gemm(ctx, wt.w, x.data(), big, whole.data()));
  std::vector<float> rows(static_cast<std::size_t>(m * c.rows), NAN);
  ASSERT_TRUE(cpu::dense_gemm_rows(ctx, wt.w, x.data(), m, rows.data()));
  ASSERT_TRUE(tests::same_bits(rows, whole, m * c.rows, c.rows));
  EXPECT_FALSE(cpu::dense_gemm_rows(ctx, wt.w, x.data(), cpu::kDenseRowsMax + 1, rows.data()));
  // From the 16-row-interleaved copy (WeightMatrix::panels16, the batch-invariant layout): the
  // GEMM and every row count (1-4 rows take the four-group decode form) give the same bits.
  ASSERT_TRUE(cpu::panels16_wanted(wt.w));
  std::vector<uint8_t> panels(cpu::panels16_bytes(wt.w) + 64);
  void* aligned = panels.data() + (64 - reinterpret_cast<uintptr_t>(panels.data()) % 64) % 64;
  cpu::interleave_panels16_blocks(wt.w, 0, (c.rows + 15) / 16, aligned);
  WeightMatrix pw = wt.w;
  pw.panels16 = aligned;
  std::vector<float> from_panels(whole.size(), NAN);
  ASSERT_TRUE(cpu::dense_gemm(ctx, pw, x.data(), big, from_panels.data()));
  ASSERT_TRUE(tests::same_bits(from_panels, whole, big * c.rows, c.rows))
      << "dense_gemm from the interleaved copy";
  for (int64_t r = 1; r <= m; r += (r < 5 ? 1 : 5)) {
    std::vector<float> part(static_cast<std::size_t>(r * c.rows), NAN);
    ASSERT_TRUE(cpu::dense_gemm_rows(ctx, pw, x.data(), r, part.data()));
    ASSERT_TRUE(tests::same_bits(part, whole, r * c.rows, c.rows))
        << r << " rows from the interleaved copy";
  }
  std::vector<float> gathered(static_cast<std::size_t>(c.cols));
  cpu::weight_rows_f32(pw, c.rows - 1, c.rows, gathered.data());
  for (int64_t k = 0; k < c.cols; ++k) {
    ASSERT_EQ(gathered[k], static_cast<float>(wt.exact[(c.rows - 1) * c.cols + k])) << k;
  }
  ctx.batch_invariant = true;
  std::vector<float> batch(whole.size(), NAN);
  cpu::linear(ctx, wt.w, x.data(), big, batch.data());
  for (const int64_t r : {int64_t{0}, big - 1}) {
    std::vector<float> alone(static_cast<std::size_t>(c.rows), NAN);
    cpu::linear(ctx, wt.w, x.data() + r * c.cols, 1, alone.data());
    const std::vector<float> in_batch(batch.begin() + r * c.rows, batch.begin() + (r + 1) * c.rows);
    ASSERT_TRUE(tests::same_bits(alone, in_batch, c.rows, c.rows))
        << "row " << r << " alone vs in a batch of " << big;
  }
}

// The copy is built into memory that is not zeroed first (Buffer::allocate_for_overwrite), in
// chunks of groups on several threads: every lane of every column must be written, rows past
// the matrix as zeros, whatever the chunks.
TEST_P(GemmDenseTest, InterleaveWritesEveryLaneInAnyChunks) {
  const Case c = GetParam();
  if (!cpu::dense_gemm_supported(WeightMatrix{c.dtype, 1, 1, nullptr})) {
    GTEST_SKIP() << "no AVX-512 in this build";
  }
  std::mt19937_64 rng(static_cast<uint64_t>(c.rows * 7 + c.cols));
  const Weights wt = make_weights(c.dtype, c.rows, c.cols, rng);
  const int64_t groups = (c.rows + 15) / 16;
  const std::size_t esize = c.dtype == DType::kF32 ? 4 : 2;
  std::vector<uint8_t> panels(cpu::panels16_bytes(wt.w) + 64, 0xFF);
  uint8_t* aligned = panels.data() + (64 - reinterpret_cast<uintptr_t>(panels.data()) % 64) % 64;
  const int64_t split = groups / 2;
  cpu::interleave_panels16_blocks(wt.w, split, groups, aligned);
  if (split > 0) cpu::interleave_panels16_blocks(wt.w, 0, split, aligned);
  const auto* src = static_cast<const uint8_t*>(wt.w.data);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t k = 0; k < c.cols; ++k) {
      for (int64_t l = 0; l < 16; ++l) {
        const int64_t row = g * 16 + l;
        const uint8_t* got = aligned + ((g * c.cols + k) * 16 + l) * esize;
        std::vector<uint8_t> want(esize, 0);
        if (row < c.rows) std::memcpy(want.data(), src + (row * c.cols + k) * esize, esize);
        ASSERT_EQ(std::memcmp(got, want.data(), esize), 0)
            << "group " << g << " column " << k << " lane " << l;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmDenseTest,
    ::testing::Values(Case{DType::kBF16, 1, 1, 1, 1}, Case{DType::kBF16, 31, 17, 5, 1},
                      Case{DType::kBF16, 33, 300, 14, 3}, Case{DType::kBF16, 70, 257, 15, 3},
                      Case{DType::kBF16, 64, 513, 29, 1}, Case{DType::kBF16, 290, 64, 40, 1},
                      Case{DType::kBF16, 97, 48, 400, 3}, Case{DType::kBF16, 600, 520, 17, 3},
                      Case{DType::kF16, 45, 130, 33, 3}, Case{DType::kF16, 32, 16, 16, 1},
                      Case{DType::kF32, 47, 271, 31, 3}, Case{DType::kF32, 16, 1, 19, 1}),
    case_name);

}  // namespace
}  // namespace hearth::kernels
