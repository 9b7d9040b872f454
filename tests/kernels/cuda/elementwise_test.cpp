// Embedding gather, RMSNorm + residual, gated activations and soft-capping against
// kernels/ref or float64 references, on odd sizes (769, 5125) and padded row strides.
#include <cmath>

#include "kernels/cuda/bias_add.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/softcap.cuh"
#include "kernels/ref/ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

using Bf16 = __nv_bfloat16;

// One bf16 rounding of the output is 2^-9 relative; a different f32 summation order can
// move a value across a rounding boundary, so elementwise outputs may differ from the
// float64 reference by up to one bf16 ulp (2^-8 relative): tolerance 2^-7 plus a tiny
// absolute term for values near zero.
void expect_within_bf16_ulp(const std::vector<float>& got, const std::vector<double>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], std::abs(ref[i]) * (1.0 / 128) + 1e-5) << "element " << i;
  }
}

TEST_F(CudaTest, EmbeddingGathersRowsAndZeroesBadIds) {
  const int vocab = 769;
  const int hidden = 5125;
  const int64_t ld_table = hidden + 3;
  const int64_t ld_out = hidden + 8;
  auto table = random_bf16_values(vocab * ld_table, 11);
  std::vector<int32_t> ids = {0, 768, 5, 5, -1, 769, 300};
  DeviceBuffer dt = upload(to_bf16(table));
  DeviceBuffer di = upload(ids);
  DeviceBuffer dout = poisoned<Bf16>(ids.size() * ld_out);
  for (float scale : {1.0f, 64.0f}) {
    ASSERT_EQ(
        embedding_gather(dt.as<Bf16>(), ld_table, di.as<int32_t>(), static_cast<int>(ids.size()),
                         hidden, vocab, scale, dout.as<Bf16>(), ld_out, ctx_->stream()),
        cudaSuccess);
    auto out = from_bf16(download<Bf16>(dout, ids.size() * ld_out));
    for (size_t t = 0; t < ids.size(); ++t) {
      bool valid = ids[t] >= 0 && ids[t] < vocab;
      for (int i = 0; i < hidden; ++i) {
        float want = valid ? round_bf16(table[ids[t] * ld_table + i] * scale) : 0.0f;
        ASSERT_EQ(out[t * ld_out + i], want) << "token " << t << " dim " << i;
      }
    }
  }
}

struct NormCase {
  int rows, dim;
  bool with_delta;
  float weight_offset;
};
class RmsNormTest : public CudaTest, public ::testing::WithParamInterface<NormCase> {};

TEST_P(RmsNormTest, MatchesReferenceAndUpdatesResidual) {
  const NormCase c = GetParam();
  const float eps = 1e-5f;
  const int64_t ld = c.dim + 5;
  auto residual = random_bf16_values(c.rows * ld, 21, 3.0f);
  auto delta = random_bf16_values(c.rows * ld, 22);
  auto weight = random_bf16_values(c.dim, 23, 0.5f);
  // The reference: the summed residual rounded to bf16 (what is stored), then ref::rms_norm
  // in f32 with weight + offset, compared in float64 terms.
  std::vector<float> summed(c.rows * c.dim);
  for (int r = 0; r < c.rows; ++r) {
    for (int i = 0; i < c.dim; ++i) {
      float v = residual[r * ld + i];
      if (c.with_delta) v = round_bf16(v + delta[r * ld + i]);
      summed[r * c.dim + i] = v;
    }
  }
  std::vector<float> w(c.dim);
  for (int i = 0; i < c.dim; ++i) w[i] = weight[i] + c.weight_offset;
  std::vector<float> ref_out(summed.size());
  kernels::ref::rms_norm(summed.data(), w.data(), c.rows, c.dim, eps, ref_out.data());

  DeviceBuffer dres = upload(to_bf16(residual));
  DeviceBuffer ddelta = upload(to_bf16(delta));
  DeviceBuffer dw = upload(to_bf16(weight));
  DeviceBuffer dout = poisoned<Bf16>(c.rows * ld);
  ASSERT_EQ(rmsnorm_residual(c.with_delta ? ddelta.as<Bf16>() : nullptr, ld, dres.as<Bf16>(), ld,
                             dw.as<Bf16>(), c.weight_offset, eps, dout.as<Bf16>(), ld, c.rows,
                             c.dim, ctx_->stream()),
            cudaSuccess);
  auto out = from_bf16(download<Bf16>(dout, c.rows * ld));
  auto res = from_bf16(download<Bf16>(dres, c.rows * ld));
  std::vector<float> got(summed.size());
  std::vector<double> want(summed.size());
  for (int r = 0; r < c.rows; ++r) {
    for (int i = 0; i < c.dim; ++i) {
      ASSERT_EQ(res[r * ld + i], summed[r * c.dim + i]);  // exact: same single rounding
      got[r * c.dim + i] = out[r * ld + i];
      want[r * c.dim + i] = ref_out[r * c.dim + i];
    }
  }
  expect_within_bf16_ulp(got, want);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, RmsNormTest,
    ::testing::Values(NormCase{1, 4096, true, 0.0f}, NormCase{3, 769, true, 0.0f},
                      NormCase{5, 5125, false, 0.0f}, NormCase{2, 5125, true, 1.0f},
                      // > 8 elements a thread: the two-pass form
                      NormCase{2, 9000, true, 0.0f}, NormCase{3, 9000, false, 1.0f}));

// Odd columns and strides take the scalar kernel; multiples of 8 the 16-byte one (gate and
// up are halves of one padded row).
struct GatedCase {
  int rows, cols;
  int64_t ld_in, ld_out;
};
class GatedActivationTest : public CudaTest, public ::testing::WithParamInterface<GatedCase> {};

TEST_P(GatedActivationTest, MatchesReference) {
  const auto [rows, cols, ld_in, ld_out] = GetParam();
  auto gate_up = random_bf16_values(rows * ld_in, 31, 2.0f);
  DeviceBuffer din = upload(to_bf16(gate_up));
  for (GatedActivation act : {GatedActivation::kSilu, GatedActivation::kGeluTanh}) {
    DeviceBuffer dout = poisoned<Bf16>(rows * ld_out);
    ASSERT_EQ(gated_activation(act, din.as<Bf16>(), ld_in, din.as<Bf16>() + cols, ld_in,
                               dout.as<Bf16>(), ld_out, rows, cols, ctx_->stream()),
              cudaSuccess);
    auto out = from_bf16(download<Bf16>(dout, rows * ld_out));
    std::vector<float> gate(rows * cols);
    std::vector<float> up(rows * cols);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < cols; ++i) {
        gate[r * cols + i] = gate_up[r * ld_in + i];
        up[r * cols + i] = gate_up[r * ld_in + cols + i];
      }
    }
    std::vector<float> silu(rows * cols);
    kernels::ref::silu_mul(gate.data(), up.data(), rows, cols, silu.data());
    std::vector<float> got(rows * cols);
    std::vector<double> want(rows * cols);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < cols; ++i) {
        got[r * cols + i] = out[r * ld_out + i];
        double g = gate[r * cols + i];
        double gelu =
            0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
        want[r * cols + i] =
            act == GatedActivation::kSilu ? silu[r * cols + i] : gelu * up[r * cols + i];
      }
    }
    expect_within_bf16_ulp(got, want);
  }
}

// tanhf is within 2 ulp of the true value; 1e-5 relative covers it and the division.
INSTANTIATE_TEST_SUITE_P(Shapes, GatedActivationTest,
                         ::testing::Values(GatedCase{3, 5125, 2 * 5125 + 7, 5125 + 1},
                                           GatedCase{64, 14336, 2 * 14336, 14336},
                                           GatedCase{5, 4104, 2 * 4104 + 8, 4104 + 8}));

TEST_F(CudaTest, SoftcapMatchesTanhFormula) {
  const int rows = 2;
  const int cols = 5125;
  const int64_t ld = cols + 3;
  auto logits = random_bf16_values(rows * ld, 41, 40.0f);
  DeviceBuffer d = upload(logits);
  ASSERT_EQ(softcap(d.as<float>(), ld, rows, cols, 30.0f, ctx_->stream()), cudaSuccess);
  auto out = download<float>(d, rows * ld);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < cols; ++i) {
      double want = 30.0 * std::tanh(logits[r * ld + i] / 30.0);
      ASSERT_NEAR(out[r * ld + i], want, 1e-5 * 30.0);
    }
    EXPECT_EQ(out[r * ld + cols], logits[r * ld + cols]);  // padding untouched
  }
  EXPECT_EQ(softcap(d.as<float>(), ld, rows, cols, 0.0f, ctx_->stream()), cudaErrorInvalidValue);
}

TEST_F(CudaTest, BiasAddAddsPerFeature) {
  const int rows = 3;
  const int cols = 769;
  const int64_t ld = cols + 9;
  auto y = random_bf16_values(rows * ld, 91);
  auto bias = random_bf16_values(cols, 92);
  DeviceBuffer dy = upload(to_bf16(y));
  DeviceBuffer db = upload(to_bf16(bias));
  ASSERT_EQ(bias_add(dy.as<Bf16>(), ld, db.as<Bf16>(), rows, cols, ctx_->stream()), cudaSuccess);
  auto out = from_bf16(download<Bf16>(dy, rows * ld));
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < cols; ++i) {
      ASSERT_EQ(out[r * ld + i], round_bf16(y[r * ld + i] + bias[i]));  // one rounding
    }
    ASSERT_EQ(out[r * ld + cols], y[r * ld + cols]);
  }
}

}  // namespace
}  // namespace hearth::cuda::testing
