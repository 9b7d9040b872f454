// The int8 dot-product path for quantized weights (kernels/cpu/int8_dot.h) against two
// oracles written here: (1) the same math in double on activations quantized by a scalar
// loop (must agree to f32 rounding), (2) ref::linear on f32 activations, within the bound
// that rounding each activation to its group's int8 grid allows: sum |w| * d / 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/same_bits.h"
#include "kernels/cpu/int8_dot.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "models/quantize.h"

namespace hearth::kernels {
namespace {

struct Case {
  int64_t rows, cols, m;
  int group, bits;
  DType scale_dtype;
};

std::string describe(const Case& c) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "r%lld_k%lld_m%lld_g%d_b%d_%s", static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), static_cast<long long>(c.m), c.group, c.bits,
                std::string(dtype_name(c.scale_dtype)).c_str());
  return buf;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return describe(info.param); }

// gtest prints a parameter it cannot print as its bytes, padding included (uninitialised).
void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

std::vector<float> random_vec(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// A case's weights quantized (quantize_affine), with its side tensors in the case's dtype as a
// model stores them; w points into the storage, so a Quantized stays where it is built.
struct Quantized {
  explicit Quantized(const Case& c) {
    auto wf = random_vec(c.rows * c.cols, 11, 0.05f);
    auto made = quantize_affine(wf.data(), c.rows, c.cols, QuantSpec{c.bits, c.group});
    EXPECT_TRUE(made.ok());
    if (!made.ok()) return;
    q = std::move(*made);
    s16.resize(q.scales.size());
    b16.resize(q.biases.size());
    for (std::size_t i = 0; i < s16.size(); ++i) {
      const bool bf = c.scale_dtype == DType::kBF16;
      s16[i] = bf ? f32_to_bf16(q.scales[i]) : f32_to_f16(q.scales[i]);
      b16[i] = bf ? f32_to_bf16(q.biases[i]) : f32_to_f16(q.biases[i]);
    }
    w = WeightMatrix{DType::kU32, c.rows, c.cols, q.packed.data()};
    w.bits = c.bits;
    w.group_size = c.group;
    w.scale_dtype = c.scale_dtype;
    w.scales =
        c.scale_dtype == DType::kF32 ? static_cast<const void*>(q.scales.data()) : s16.data();
    w.biases =
        c.scale_dtype == DType::kF32 ? static_cast<const void*>(q.biases.data()) : b16.data();
  }
  Quantized(const Quantized&) = delete;
  Quantized& operator=(const Quantized&) = delete;

  // w with the rows16 layout (interleave_rows16) and no row-major codes, scales or biases
  // (null), as a model holds it after releasing them.
  WeightMatrix with_rows16() {
    const cpu::Rows16Bytes bytes = cpu::rows16_bytes(w);
    codes16.assign(bytes.codes, 0);
    scales16.assign(bytes.side, 0);
    biases16.assign(bytes.side, 0);
    cpu::interleave_rows16(w, codes16.data(), scales16.data(), biases16.data());
    WeightMatrix w16 = w;
    w16.data = w16.scales = w16.biases = nullptr;
    w16.rows16 = codes16.data();
    w16.rows16_scales = scales16.data();
    w16.rows16_biases = biases16.data();
    return w16;
  }

  QuantizedMatrix q;
  std::vector<uint16_t> s16, b16;
  std::vector<uint8_t> codes16, scales16, biases16;
  WeightMatrix w;
};

class Int8DotTest : public ::testing::TestWithParam<Case> {};

TEST_P(Int8DotTest, MatchesEmulationAndStaysWithinTheQuantizationBound) {
  if (!cpu::int8_dot_available()) GTEST_SKIP() << "no AVX512-VNNI int8 kernels on this CPU/build";
  const Case c = GetParam();
  const int64_t groups = c.cols / c.group;
  auto x = random_vec(c.m * c.cols, 12, 1.0f);
  // A row of zeros and a group of one large outlier: the degenerate scales.
  if (c.m >= 3) std::fill(x.end() - c.cols, x.end(), 0.0f);
  if (c.m >= 2) x[c.cols + 3] = 40.0f;
  Quantized qm(c);
  const WeightMatrix& w = qm.w;
  ASSERT_TRUE(cpu::int8_dot_supported(w));

  // Activations quantized by a scalar loop: per group d = max|x| / 127, xq = round(x / d).
  std::vector<float> xq(x.size()), d(static_cast<std::size_t>(c.m * groups));
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = &x[i * c.cols + g * c.group];
      float a = 0.0f;
      for (int t = 0; t < c.group; ++t) a = std::max(a, std::abs(xg[t]));
      const float inv = a > 0.0f ? 127.0f / a : 0.0f;
      d[i * groups + g] = a / 127.0f;
      for (int t = 0; t < c.group; ++t) {
        xq[i * c.cols + g * c.group + t] = std::clamp(std::nearbyint(xg[t] * inv), -127.0f, 127.0f);
      }
    }
  }
  std::vector<float> wrow(static_cast<std::size_t>(c.cols));
  std::vector<float> want(static_cast<std::size_t>(c.m * c.rows));
  ref::linear(w, x.data(), c.m, want.data());
  std::vector<float> got(want.size(), NAN);
  cpu::CpuContext ctx(2);
  ctx.int8_dot = true;
  // Twice through the same pool: buffers and workers are reused across calls.
  for (int pass = 0; pass < 2; ++pass) cpu::linear(ctx, w, x.data(), c.m, got.data());

  const int per_word = 32 / c.bits;
  const auto* words = qm.q.packed.data();
  for (int64_t r = 0; r < c.rows; ++r) {
    ref::weight_row(w, r, wrow.data());
    for (int64_t i = 0; i < c.m; ++i) {
      double emu = 0.0, magnitude = 0.0, bound = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        const double s = read_scalar(w.scales, w.scale_dtype, r * groups + g);
        const double b = read_scalar(w.biases, w.scale_dtype, r * groups + g);
        double qx = 0.0, sx = 0.0;
        for (int64_t col = g * c.group; col < (g + 1) * c.group; ++col) {
          const uint32_t code =
              (words[(r * c.cols + col) / per_word] >> ((col % per_word) * c.bits)) &
              ((1u << c.bits) - 1u);
          qx += code * static_cast<double>(xq[i * c.cols + col]);
          sx += x[i * c.cols + col];
          magnitude += std::abs(static_cast<double>(wrow[col]) * x[i * c.cols + col]);
          bound += std::abs(static_cast<double>(wrow[col])) * d[i * groups + g] / 2;
        }
        emu += s * d[i * groups + g] * qx + b * sx;
      }
      const float y = got[i * c.rows + r];
      ASSERT_NEAR(y, emu, 2e-5 * magnitude + 1e-5) << "row " << r << " act row " << i;
      ASSERT_NEAR(y, want[i * c.rows + r], bound + 2e-5 * magnitude + 1e-5)
          << "row " << r << " act row " << i;
    }
  }

  // The batch-invariant decode (rows16): 1-4 activation rows give the same bits as the
  // prefill GEMM gives those rows inside a batch of 8.
  const WeightMatrix w16 = qm.with_rows16();
  constexpr int64_t kBatch = 8;
  std::vector<float> xb(static_cast<std::size_t>(kBatch * c.cols));
  for (int64_t i = 0; i < kBatch; ++i) {
    std::copy_n(&x[(i % c.m) * c.cols], c.cols, &xb[i * c.cols]);
  }
  std::vector<float> batch(static_cast<std::size_t>(kBatch * c.rows));
  cpu::linear(ctx, w16, xb.data(), kBatch, batch.data());
  for (int64_t m = 1; m <= 4; ++m) {
    std::vector<float> alone(static_cast<std::size_t>(m * c.rows), NAN);
    cpu::linear(ctx, w16, xb.data(), m, alone.data());
    ASSERT_TRUE(tests::same_bits(alone, batch, m * c.rows, c.rows)) << "m " << m;
  }
}

// The prefill GEMM (5+ rows) from the rows16 layout gives the same bits as from the row-major
// codes (so a model may drop those): every case at its own batch when that takes the GEMM,
// else at 5 and 37 rows (one partial activation tile; a full one and a partial one).
TEST_P(Int8DotTest, GemmFromRows16IsBitwiseTheSame) {
  if (!cpu::int8_dot_available()) GTEST_SKIP() << "no AVX512-VNNI int8 kernels on this CPU/build";
  const Case c = GetParam();
  Quantized qm(c);
  const WeightMatrix w16 = qm.with_rows16();
  cpu::CpuContext ctx(2);
  ctx.int8_dot = true;
  std::vector<int64_t> batches = {5, 37};
  if (c.m > 4) batches = {c.m};
  for (int64_t m : batches) {
    const auto x = random_vec(m * c.cols, 13, 1.0f);
    std::vector<float> plain(static_cast<std::size_t>(m * c.rows), NAN);
    std::vector<float> from16(plain.size(), NAN);
    cpu::linear(ctx, qm.w, x.data(), m, plain.data());
    cpu::linear(ctx, w16, x.data(), m, from16.data());
    ASSERT_TRUE(tests::same_bits(plain, from16, m * c.rows, c.rows)) << "m " << m;
  }
}

// A tied embedding gathers token rows from the rows16 copy once the row-major codes are
// released: every row (the last block's too, rows not a multiple of 16) as the original's.
// The load builds the rows16 copy into memory not zeroed first, in chunks of blocks on several
// threads: whatever the chunks, every byte must come out as one call into zeroed memory gives.
TEST_P(Int8DotTest, Rows16WritesEveryByteInAnyChunks) {
  const Case c = GetParam();
  Quantized qz(c);
  qz.with_rows16();  // the reference: one call into zeroed buffers
  const cpu::Rows16Bytes bytes = cpu::rows16_bytes(qz.w);
  std::vector<uint8_t> codes(bytes.codes, 0xff), scales(bytes.side, 0xff), biases(bytes.side, 0xff);
  const int64_t blocks = (c.rows + 15) / 16;
  const int64_t split = blocks / 2;
  cpu::interleave_rows16_blocks(qz.w, split, blocks, codes.data(), scales.data(), biases.data());
  if (split > 0) {
    cpu::interleave_rows16_blocks(qz.w, 0, split, codes.data(), scales.data(), biases.data());
  }
  EXPECT_EQ(codes, qz.codes16);
  EXPECT_EQ(scales, qz.scales16);
  EXPECT_EQ(biases, qz.biases16);
}

TEST_P(Int8DotTest, RowsGatheredFromRows16AreBitwiseTheSame) {
  const Case c = GetParam();
  Quantized qm(c);
  const WeightMatrix w16 = qm.with_rows16();
  std::vector<float> plain(static_cast<std::size_t>(c.rows * c.cols), NAN);
  std::vector<float> from16(plain.size(), NAN);
  cpu::weight_rows_f32(qm.w, 0, c.rows, plain.data());
  for (int64_t r = c.rows; r-- > 0;) {  // one row a call, last first
    cpu::weight_rows_f32(w16, r, r + 1, from16.data() + r * c.cols);
  }
  ASSERT_TRUE(tests::same_bits(plain, from16, c.rows * c.cols, c.cols));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int8DotTest,
    ::testing::Values(
        // Decode (1-4 rows): 64-column chunks, group 32 with a 32-column tail (96, 2080).
        Case{37, 96, 1, 32, 4, DType::kF32}, Case{37, 96, 3, 32, 8, DType::kBF16},
        Case{21, 2080, 2, 32, 4, DType::kF16}, Case{21, 2080, 4, 32, 8, DType::kF32},
        Case{769, 64, 1, 64, 8, DType::kBF16}, Case{33, 2112, 2, 64, 4, DType::kBF16},
        Case{13, 320, 4, 64, 8, DType::kF16}, Case{7, 384, 1, 128, 4, DType::kF32},
        Case{19, 1152, 3, 128, 8, DType::kBF16}, Case{29, 1024, 1, 64, 4, DType::kBF16},
        // Batch-1 (the lean decode paths): groups not a multiple of 16, group 128, a 64-column
        // tail.
        Case{35, 1088, 1, 64, 8, DType::kF32}, Case{21, 1280, 1, 128, 8, DType::kF16},
        Case{33, 2112, 1, 64, 4, DType::kF16}, Case{9, 1408, 1, 128, 4, DType::kBF16},
        // Prefill GEMM (5+ rows): partial 32-row activation tiles, weight rows not a multiple
        // of the 6-row tile, column blocks over 1024 columns adding up.
        Case{31, 96, 5, 32, 4, DType::kBF16}, Case{23, 2080, 17, 32, 8, DType::kF32},
        Case{769, 320, 33, 64, 4, DType::kBF16}, Case{45, 1088, 130, 64, 8, DType::kBF16},
        Case{50, 2112, 9, 64, 4, DType::kF16}, Case{17, 1152, 40, 128, 4, DType::kF32},
        Case{11, 384, 16, 128, 8, DType::kF16}, Case{20, 512, 1022, 64, 8, DType::kBF16},
        Case{20, 1536, 300, 64, 4, DType::kBF16}, Case{13, 512, 260, 64, 8, DType::kBF16}),
    case_name);

// The option changes nothing for float weights, and is reported off where unsupported.
TEST(Int8Dot, FloatWeightsIgnoreTheOption) {
  auto wf = random_vec(29 * 96, 21, 0.1f);
  auto x = random_vec(6 * 96, 22, 1.0f);
  WeightMatrix w{DType::kF32, 29, 96, wf.data()};
  EXPECT_FALSE(cpu::int8_dot_supported(w));
  cpu::CpuContext ctx(2);
  std::vector<float> a(6 * 29), b(6 * 29);
  cpu::linear(ctx, w, x.data(), 6, a.data());
  ctx.int8_dot = true;
  cpu::linear(ctx, w, x.data(), 6, b.data());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace hearth::kernels
