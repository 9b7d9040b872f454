// MLX-affine GEMV and dequantization against kernels/ref's quantized linear and
// weight_row, for 4 and 8 bits, every group size, bf16 and f16 scales, 1..8 rows.
#include <cuda_fp16.h>

#include "kernels/cuda/affine_quant.cuh"
#include "kernels/ref/ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

using Bf16 = __nv_bfloat16;

struct QuantCase {
  int bits, group_size, n, k, m;
  bool f16_scales;
};
class AffineQuantTest : public CudaTest, public ::testing::WithParamInterface<QuantCase> {};

// Tolerance: the GEMV accumulates in f32 and rounds once to bf16 (2^-9 relative):
// relative L2 error under 4e-3. Dequantization is one f32 fma (or mul + add) and one
// rounding: within one bf16 ulp.
TEST_P(AffineQuantTest, GemvAndDequantizeMatchRef) {
  const QuantCase c = GetParam();
  std::mt19937 rng(81);
  std::vector<uint32_t> packed(static_cast<size_t>(c.n) * c.k * c.bits / 32);
  for (uint32_t& w : packed) w = rng();
  const int groups = c.k / c.group_size;
  auto scales_f = random_bf16_values(static_cast<size_t>(c.n) * groups, 82, 0.02f);
  auto biases_f = random_bf16_values(static_cast<size_t>(c.n) * groups, 83, 0.1f);
  std::vector<uint16_t> scales(scales_f.size());
  std::vector<uint16_t> biases(biases_f.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    if (c.f16_scales) {
      __half s = __float2half(scales_f[i]);
      __half b = __float2half(biases_f[i]);
      scales[i] = *reinterpret_cast<uint16_t*>(&s);
      biases[i] = *reinterpret_cast<uint16_t*>(&b);
    } else {
      Bf16 s = __float2bfloat16(scales_f[i]);
      Bf16 b = __float2bfloat16(biases_f[i]);
      scales[i] = *reinterpret_cast<uint16_t*>(&s);
      biases[i] = *reinterpret_cast<uint16_t*>(&b);
    }
  }
  kernels::WeightMatrix ref_w;
  ref_w.dtype = DType::kU32;
  ref_w.rows = c.n;
  ref_w.cols = c.k;
  ref_w.data = packed.data();
  ref_w.bits = c.bits;
  ref_w.group_size = c.group_size;
  ref_w.scale_dtype = c.f16_scales ? DType::kF16 : DType::kBF16;
  ref_w.scales = scales.data();
  ref_w.biases = biases.data();
  const int64_t ldx = c.k + 8;
  auto x = random_bf16_values(c.m * ldx, 84);
  std::vector<float> x_dense(c.m * c.k);
  for (int r = 0; r < c.m; ++r) std::copy_n(&x[r * ldx], c.k, &x_dense[r * c.k]);
  std::vector<float> ref_y(c.m * c.n);
  kernels::ref::linear(ref_w, x_dense.data(), c.m, ref_y.data());

  DeviceBuffer dp = upload(packed);
  DeviceBuffer ds = upload(scales);
  DeviceBuffer db = upload(biases);
  DeviceBuffer dx = upload(to_bf16(x));
  AffineQuantWeight w;
  w.packed = dp.as<uint32_t>();
  w.scales = ds.data();
  w.biases = db.data();
  w.f16_scales = c.f16_scales;
  w.n = c.n;
  w.k = c.k;
  w.bits = c.bits;
  w.group_size = c.group_size;
  const int64_t ldy = c.n + 1;
  DeviceBuffer dy = poisoned<Bf16>(c.m * ldy);
  ASSERT_EQ(
      affine_gemv(w, dx.as<Bf16>(), ldx, c.m, dy.data(), ldy, false, sm_count(), ctx_->stream()),
      cudaSuccess);
  auto y = from_bf16(download<Bf16>(dy, c.m * ldy));
  std::vector<float> got(c.m * c.n);
  std::vector<double> want(ref_y.begin(), ref_y.end());
  for (int r = 0; r < c.m; ++r) std::copy_n(&y[r * ldy], c.n, &got[r * c.n]);
  EXPECT_LT(relative_error(got, want), 4e-3);
  // f32 output (logits): only the summation order differs from ref, 1e-4.
  DeviceBuffer dy32 = poisoned<float>(c.m * ldy);
  ASSERT_EQ(
      affine_gemv(w, dx.as<Bf16>(), ldx, c.m, dy32.data(), ldy, true, sm_count(), ctx_->stream()),
      cudaSuccess);
  auto y32 = download<float>(dy32, c.m * ldy);
  for (int r = 0; r < c.m; ++r) std::copy_n(&y32[r * ldy], c.n, &got[r * c.n]);
  EXPECT_LT(relative_error(got, want), 1e-4);

  // Quantized embedding rows (MLX quantizes embed_tokens too): ref's weight_row, bf16.
  std::vector<int32_t> ids = {0, c.n - 1, 7, -3, c.n};
  DeviceBuffer dids = upload(ids);
  DeviceBuffer demb = poisoned<Bf16>(ids.size() * c.k);
  ASSERT_EQ(affine_embedding_gather(w, dids.as<int32_t>(), static_cast<int>(ids.size()), 1.0f,
                                    demb.as<Bf16>(), c.k, ctx_->stream()),
            cudaSuccess);
  auto emb = from_bf16(download<Bf16>(demb, ids.size() * c.k));
  std::vector<float> ref_row(c.k);
  for (size_t t = 0; t < ids.size(); ++t) {
    bool valid = ids[t] >= 0 && ids[t] < c.n;
    if (valid) kernels::ref::weight_row(ref_w, ids[t], ref_row.data());
    for (int i = 0; i < c.k; ++i) {
      float want = valid ? ref_row[i] : 0.0f;
      ASSERT_NEAR(emb[t * c.k + i], want, std::abs(want) / 128.0 + 1e-6) << "token " << t;
    }
  }

  DeviceBuffer dw = poisoned<Bf16>(static_cast<size_t>(c.n) * c.k);
  ASSERT_EQ(affine_dequantize(w, dw.as<Bf16>(), c.k, ctx_->stream()), cudaSuccess);
  auto deq = from_bf16(download<Bf16>(dw, static_cast<size_t>(c.n) * c.k));
  std::vector<float> row(c.k);
  for (int r = 0; r < c.n; r += 97) {
    kernels::ref::weight_row(ref_w, r, row.data());
    for (int i = 0; i < c.k; ++i) {
      ASSERT_NEAR(deq[r * c.k + i], row[i], std::abs(row[i]) / 128.0 + 1e-6)
          << "row " << r << " col " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AffineQuantTest,
                         ::testing::Values(QuantCase{4, 64, 769, 4160, 1, false},
                                           QuantCase{4, 32, 5125, 1024, 3, true},
                                           QuantCase{4, 128, 1024, 5120, 8, false},
                                           QuantCase{8, 64, 769, 4160, 2, false},
                                           QuantCase{8, 32, 333, 2080, 5, true},
                                           QuantCase{8, 128, 4096, 1024, 1, false}));

TEST_F(CudaTest, AffineGemvRejectsBadShapes) {
  AffineQuantWeight w;
  w.n = 16;
  w.k = 100;  // not a multiple of the group size
  EXPECT_EQ(affine_gemv(w, nullptr, 128, 1, nullptr, 16, false, 1, ctx_->stream()),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace hearth::cuda::testing
