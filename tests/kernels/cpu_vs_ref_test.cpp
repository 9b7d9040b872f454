// CPU kernels against the reference ops on sizes that break vector tails (769, 5125) and
// every weight format (f32, bf16, f16, MLX 4/8-bit). Tolerances: f32 sums reassociated by
// SIMD differ from the double-accumulated reference by ~1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "models/quantize.h"

namespace hearth::kernels {
namespace {

std::vector<float> random_vec(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * (1.0 + std::abs(b[i]))) << "index " << i;
  }
}

struct Case {
  int64_t rows, cols, m;
};

class LinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(LinearTest, AllFormatsMatchReference) {
  const auto [rows, cols, m] = GetParam();
  cpu::CpuContext ctx(2);
  auto w = random_vec(rows * cols, 1);
  auto x = random_vec(m * cols, 2);
  std::vector<uint16_t> bf(w.size()), hf(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    bf[i] = f32_to_bf16(w[i]);
    hf[i] = f32_to_f16(w[i]);
  }
  std::vector<WeightMatrix> mats = {{DType::kF32, rows, cols, w.data()},
                                    {DType::kBF16, rows, cols, bf.data()},
                                    {DType::kF16, rows, cols, hf.data()}};
  std::vector<QuantizedMatrix> quant;
  for (int bits : {4, 8}) {
    const int group = cols % 64 == 0 ? 64 : 32;
    if (cols % group != 0) continue;
    auto q = quantize_affine(w.data(), rows, cols, QuantSpec{bits, group});
    ASSERT_TRUE(q.ok());
    quant.push_back(std::move(q).value());
  }
  for (const auto& q : quant) {
    WeightMatrix qm{DType::kU32, rows, cols, q.packed.data()};
    qm.bits = q.spec.bits;
    qm.group_size = q.spec.group_size;
    qm.scale_dtype = DType::kF32;
    qm.scales = q.scales.data();
    qm.biases = q.biases.data();
    mats.push_back(qm);
  }
  for (const auto& mat : mats) {
    std::vector<float> want(static_cast<std::size_t>(m * rows)), got(want.size());
    ref::linear(mat, x.data(), m, want.data());
    cpu::linear(ctx, mat, x.data(), m, got.data());
    SCOPED_TRACE(std::string(dtype_name(mat.dtype)) + " bits " + std::to_string(mat.bits));
    expect_close(got, want, 2e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, LinearTest,
                         ::testing::Values(Case{769, 64, 1}, Case{5125, 96, 3}, Case{33, 769, 2},
                                           Case{65, 5120, 1}, Case{769, 128, 7}, Case{129, 512, 17},
                                           Case{257, 256, 4},
                                           // Prefill batches (rows > 4): quantized slices are
                                           // dequantized as the GEMM packs them; odd row counts
                                           // leave partial weight and activation tiles.
                                           Case{769, 320, 33}, Case{45, 1024, 130}, Case{31, 96, 5},
                                           // Over 1024 columns: partial column blocks add up.
                                           Case{37, 2112, 9}, Case{19, 2080, 35}));

// Quantized prefill off the int8 path in AVX-512 builds: hearth's GEMM, weights dequantized as
// they are packed. It sums a row from its own activations alone, so every row of a 300-row call
// gets the bits it gets in a call of 100 (three calls), and stays within the reference.
TEST(LinearQuantizedPrefill, EveryRowGetsTheBitsOfASmallerCall) {
  {
    // HEARTH_CPU_PREFILL_GEMM=blas reaches its route (OpenBLAS for float and quantized weights).
    setenv("HEARTH_CPU_PREFILL_GEMM", "blas", 1);
    cpu::CpuContext blas(1);
    unsetenv("HEARTH_CPU_PREFILL_GEMM");
    EXPECT_EQ(cpu::prefill_gemm_name(blas).find("hearth"), std::string::npos)
        << cpu::prefill_gemm_name(blas);
  }
  cpu::CpuContext ctx(2);
  const std::string name = cpu::prefill_gemm_name(ctx);
  if (name.find("quantized off the int8 path: hearth") == std::string::npos) {
    GTEST_SKIP() << "no AVX-512 prefill kernels in this build: " << name;
  }
  SCOPED_TRACE(name);
  const int64_t rows = 45, cols = 1024, m = 300;
  auto w = random_vec(rows * cols, 3);
  auto x = random_vec(m * cols, 4);
  for (int bits : {4, 8}) {
    auto q = quantize_affine(w.data(), rows, cols, QuantSpec{bits, 64});
    ASSERT_TRUE(q.ok());
    WeightMatrix qm{DType::kU32, rows, cols, q->packed.data()};
    qm.bits = bits;
    qm.group_size = 64;
    qm.scale_dtype = DType::kF32;
    qm.scales = q->scales.data();
    qm.biases = q->biases.data();
    std::vector<float> all(static_cast<std::size_t>(m * rows)), parts(all.size()), want(all.size());
    cpu::linear(ctx, qm, x.data(), m, all.data());
    for (int64_t i0 = 0; i0 < m; i0 += 100) {
      cpu::linear(ctx, qm, x.data() + i0 * cols, 100, parts.data() + i0 * rows);
    }
    ref::linear(qm, x.data(), m, want.data());
    SCOPED_TRACE("bits " + std::to_string(bits));
    ASSERT_EQ(all, parts);
    expect_close(all, want, 2e-4);
  }
}

// MLX's grid is anchored exactly at the larger-magnitude edge of each group and the step is
// rescaled to keep zero representable, so the far edge may sit up to ~a step outside the grid.
TEST(QuantizeAffine, DequantizedErrorIsWithinAStep) {
  auto w = random_vec(8 * 64, 3);
  for (int bits : {4, 8}) {
    auto q = quantize_affine(w.data(), 8, 64, QuantSpec{bits, 32});
    ASSERT_TRUE(q.ok());
    WeightMatrix qm{DType::kU32, 8, 64, q->packed.data()};
    qm.bits = bits;
    qm.group_size = 32;
    qm.scales = q->scales.data();
    qm.biases = q->biases.data();
    std::vector<float> row(64);
    for (int r = 0; r < 8; ++r) {
      ref::weight_row(qm, r, row.data());
      for (int c = 0; c < 64; ++c) {
        const float step = std::abs(q->scales[r * 2 + c / 32]);
        EXPECT_LE(std::abs(row[c] - w[r * 64 + c]), step + 1e-6f);
      }
    }
  }
}

TEST(Ops, NormRopeSiluAttentionMatchReference) {
  cpu::CpuContext ctx(2);
  const int tokens = 37, heads = 4, kv_heads = 2, hd = 64, block = 8;
  auto x = random_vec(tokens * heads * hd, 4);
  auto w = random_vec(hd, 5);
  std::vector<float> a(x.size()), b(x.size());
  ref::rms_norm(x.data(), w.data(), tokens * heads, hd, 1e-5f, a.data());
  cpu::rms_norm(ctx, x.data(), w.data(), tokens * heads, hd, 1e-5f, b.data());
  expect_close(b, a, 1e-5);

  std::vector<int32_t> pos(tokens);
  for (int i = 0; i < tokens; ++i) pos[i] = 3 * i + 1;
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
  a = x;
  b = x;
  ref::rope(a.data(), pos.data(), tokens, heads, hd, inv.data(), 1.1f);
  cpu::rope(ctx, b.data(), pos.data(), tokens, heads, hd, inv.data(), 1.1f);
  expect_close(b, a, 1e-5);

  auto up = random_vec(x.size(), 6);
  ref::silu_mul(x.data(), up.data(), tokens, heads * hd, a.data());
  cpu::silu_mul(ctx, x.data(), up.data(), tokens, heads * hd, b.data());
  expect_close(b, a, 1e-6);

  // Two sequences: one with 5 cached tokens + 20 new, one decode row after 11 cached.
  const int num_blocks = 16;
  auto kc = random_vec(num_blocks * block * kv_heads * hd, 7);
  auto vc = random_vec(num_blocks * block * kv_heads * hd, 8);
  std::vector<int32_t> t1 = {9, 3, 14, 0}, t2 = {5, 12};
  AttentionSequence seqs[2] = {{0, 20, 5, t1.data()}, {20, 1, 11, t2.data()}};
  auto q = random_vec(21 * heads * hd, 9);
  for (int window : {0, 6}) {
    std::vector<float> o1(q.size()), o2(q.size());
    PagedAttentionArgs args{q.data(), o1.data(), kc.data(), vc.data(), heads, kv_heads,
                            hd,       block,     0.125f,    window,    seqs,  2};
    ref::paged_attention(args);
    args.out = o2.data();
    cpu::paged_attention(ctx, args);
    expect_close(o2, o1, 1e-5);
  }
}

TEST(DType, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // rounds to infinity
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
  }
}

}  // namespace
}  // namespace hearth::kernels
