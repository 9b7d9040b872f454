// MLX-affine GEMV and dequantization against kernels/ref's quantized linear and
// weight_row, for 4 and 8 bits, every group size, bf16 and f16 scales, 1..8 rows; the fused
// decode forms against the unfused kernels.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda/affine_gemv_mma.cuh"
#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope_frequencies.h"
#include "kernels/cuda/rope_kv_write.cuh"
#include "kernels/ref/ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

using Bf16 = __nv_bfloat16;

// w relaid as `layout` (affine_tile) into `buf`, allocated here; the weight that reads it.
AffineQuantWeight tiled_copy(DeviceContext& ctx, const AffineQuantWeight& w, AffineLayout layout,
                             int head_dim, DeviceBuffer& buf) {
  auto b = ctx.allocate(affine_tiled_bytes(w, layout), "tiled weight");
  EXPECT_TRUE(b.ok());
  buf = std::move(b).value();
  EXPECT_EQ(affine_tile(w, layout, head_dim, buf.data(), ctx.stream()), cudaSuccess);
  return affine_tiled_view(w, layout, head_dim, buf.data());
}

std::vector<uint16_t> bits16(const std::vector<Bf16>& v) {
  std::vector<uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 2);
  return out;
}

struct QuantCase {
  int bits, group_size, n, k, m;
  bool f16_scales;
  bool outliers = false;  // x row 0: one massive activation, a zero chunk, a tiny chunk
};
class AffineQuantTest : public CudaTest, public ::testing::WithParamInterface<QuantCase> {};

// Tolerance: the GEMV rounds x to half per 16-byte weight chunk (scaled so the chunk's
// largest |x| is in [1, 2): 11 significant bits), multiplies and sums 8 products in half,
// and accumulates the chunks in f32: a host simulation of that arithmetic gives relative L2
// errors of 3-5e-4 on these distributions, so f32 outputs (logits) are held to 1.5e-3 —
// below the 2^-9 of the bf16 logits the oracle (transformers in bf16) produces — and bf16
// outputs, which add one rounding (2^-9 relative), to 4e-3. Dequantization is one f32 fma
// (or mul + add) and one rounding: within one bf16 ulp.
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
  if (c.outliers) {
    x[5] = 3000.0f;
    for (int i = 64; i < 96; ++i) x[i] = 0.0f;
    for (int i = 96; i < 128; ++i) x[i] = round_bf16(x[i] * 1e-30f);
  }
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
  // f32 output (logits).
  DeviceBuffer dy32 = poisoned<float>(c.m * ldy);
  ASSERT_EQ(
      affine_gemv(w, dx.as<Bf16>(), ldx, c.m, dy32.data(), ldy, true, sm_count(), ctx_->stream()),
      cudaSuccess);
  auto y32 = download<float>(dy32, c.m * ldy);
  for (int r = 0; r < c.m; ++r) std::copy_n(&y32[r * ldy], c.n, &got[r * c.n]);
  // An activation ~1000x its chunk's others (the outlier cases) leaves their products below
  // the half accumulator's resolution next to its own: W3 measured 2.9e-3 there.
  EXPECT_LT(relative_error(got, want), c.outliers ? 4e-3 : 1.5e-3);

  // Each kernel by name, f32 output. The tensor-core kernel (4 bits, groups of 64 / 128,
  // k % 256 == 0) multiplies exact bf16 x by exact 128 + q, sums in the mma's f32
  // accumulator, then applies s·(c - 128·Σx) + b·Σx per 64 values: 1e-4 on these
  // distributions. With one activation ~1000x the rest (outliers) the device measured
  // 2.7e-3: the mma keeps ~13 bits below the largest product of a slice (128·3000 here),
  // which the 128·Σx cancellation then exposes, so the register kernel's 4e-3 applies.
  for (AffineGemvKernel kernel : {AffineGemvKernel::kRegister, AffineGemvKernel::kTensorCore}) {
    AffineGemvArgs a;
    a.w = w;
    a.x = dx.as<Bf16>();
    a.ldx = ldx;
    a.y = dy32.data();
    a.ldy = ldy;
    a.y_f32 = true;
    a.m = c.m;
    a.sm_count = sm_count();
    a.kernel = kernel;
    const bool tensor = kernel == AffineGemvKernel::kTensorCore;
    const bool expect_tensor = c.bits == 4 && c.group_size >= 64 && c.k % 256 == 0;
    ASSERT_EQ(affine_gemv_supported(a), !tensor || expect_tensor);
    if (!affine_gemv_supported(a)) continue;
    ASSERT_EQ(affine_gemv(a, ctx_->stream()), cudaSuccess);
    y32 = download<float>(dy32, c.m * ldy);
    for (int r = 0; r < c.m; ++r) std::copy_n(&y32[r * ldy], c.n, &got[r * c.n]);
    const double tol = c.outliers ? 4e-3 : tensor ? 1e-4 : 1.5e-3;
    EXPECT_LT(relative_error(got, want), tol)
        << (tensor ? "tensor-core kernel" : "register kernel");
    if (!tensor) continue;
    // The same weight tiled (kTiledPlain): the same sums, the same bits; the register kernel
    // and the embedding gather refuse it; its dequantization writes the row-major bits.
    const std::vector<float> first = got;
    DeviceBuffer tiled_buf;
    AffineGemvArgs t = a;
    t.w = tiled_copy(*ctx_, w, AffineLayout::kTiledPlain, 0, tiled_buf);
    ASSERT_TRUE(affine_gemv_supported(t));
    ASSERT_EQ(affine_gemv(t, ctx_->stream()), cudaSuccess);
    y32 = download<float>(dy32, c.m * ldy);
    for (int r = 0; r < c.m; ++r) std::copy_n(&y32[r * ldy], c.n, &got[r * c.n]);
    EXPECT_EQ(got, first) << "tiled layout";
    t.kernel = AffineGemvKernel::kRegister;
    EXPECT_FALSE(affine_gemv_supported(t));
    DeviceBuffer one_id = upload(std::vector<int32_t>{0});
    DeviceBuffer one_row = poisoned<Bf16>(c.k);
    EXPECT_EQ(affine_embedding_gather(t.w, one_id.as<int32_t>(), 1, 1.0f, one_row.as<Bf16>(), c.k,
                                      ctx_->stream()),
              cudaErrorInvalidValue);
    DeviceBuffer d_row = poisoned<Bf16>(static_cast<size_t>(c.n) * c.k);
    DeviceBuffer d_tiled = poisoned<Bf16>(static_cast<size_t>(c.n) * c.k);
    ASSERT_EQ(affine_dequantize(w, d_row.as<Bf16>(), c.k, ctx_->stream()), cudaSuccess);
    ASSERT_EQ(affine_dequantize(t.w, d_tiled.as<Bf16>(), c.k, ctx_->stream()), cudaSuccess);
    EXPECT_EQ(bits16(download<Bf16>(d_tiled, static_cast<size_t>(c.n) * c.k)),
              bits16(download<Bf16>(d_row, static_cast<size_t>(c.n) * c.k)))
        << "tiled dequantize";
  }

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

INSTANTIATE_TEST_SUITE_P(
    Shapes, AffineQuantTest,
    ::testing::Values(
        QuantCase{4, 64, 769, 4160, 1, false}, QuantCase{4, 32, 5125, 1024, 3, true},
        QuantCase{4, 128, 1024, 5120, 8, false}, QuantCase{8, 64, 769, 4160, 2, false},
        QuantCase{8, 32, 333, 2080, 5, true}, QuantCase{8, 128, 4096, 1024, 1, false},
        // whole rows per warp (n >= 4 x warp slots)
        QuantCase{4, 64, 17001, 1024, 1, false}, QuantCase{8, 32, 9001, 2048, 4, true},
        // x staged in shared memory in batches of rows (3, 3, 2 and 7 x 1)
        QuantCase{4, 64, 96, 14336, 8, false}, QuantCase{8, 128, 65, 30720, 7, false},
        QuantCase{4, 64, 512, 4096, 2, false, true}, QuantCase{8, 64, 512, 4096, 1, true, true},
        // the tensor-core kernel: odd n (a partial 16-row tile), k of 1 chunk (7 idle warps)
        // and of 56 (uneven warp shares), f16 scales, every row count of one batch
        QuantCase{4, 64, 4099, 256, 5, false}, QuantCase{4, 64, 771, 14336, 1, true},
        QuantCase{4, 128, 333, 2816, 7, true, true}, QuantCase{4, 64, 6144, 4096, 4, false}));

TEST_F(CudaTest, AffineGemvRejectsBadShapes) {
  AffineQuantWeight w;
  w.n = 16;
  w.k = 100;  // not a multiple of the group size
  EXPECT_EQ(affine_gemv(w, nullptr, 128, 1, nullptr, 16, false, 1, ctx_->stream()),
            cudaErrorInvalidValue);
}

// The fused decode forms (AffineGemvArgs) against the unfused kernels: the RMSNorm prologue
// and the residual-add epilogue give the same bits as rmsnorm_residual + GEMV and GEMV + add
// (same staging, same summation order); PDL launches change nothing; the gated SiLU output
// matches GEMV + gated_activation within 8e-3 relative L2 (the pair task may use another
// row split, so the dots round differently before bf16: ~2^-9 per output).
struct FusedCase {
  int bits, n, k, m;
};
class AffineFusedTest : public CudaTest, public ::testing::WithParamInterface<FusedCase> {};

TEST_P(AffineFusedTest, MatchesUnfusedKernels) {
  const FusedCase c = GetParam();
  std::mt19937 rng(91);
  std::vector<uint32_t> packed(static_cast<size_t>(2 * c.n) * c.k * c.bits / 32);
  for (uint32_t& w : packed) w = rng();
  const int groups = c.k / 64;
  auto scales = to_bf16(random_bf16_values(static_cast<size_t>(2 * c.n) * groups, 92, 0.01f));
  auto biases = to_bf16(random_bf16_values(static_cast<size_t>(2 * c.n) * groups, 93, 0.08f));
  auto x = to_bf16(random_bf16_values(static_cast<size_t>(c.m) * c.k, 94, 3.0f));
  auto norm = to_bf16(random_bf16_values(c.k, 95, 1.0f));
  auto resid = to_bf16(random_bf16_values(static_cast<size_t>(c.m) * c.n, 96, 4.0f));
  DeviceBuffer dp = upload(packed), ds = upload(scales), db = upload(biases);
  DeviceBuffer dx = upload(x), dnorm = upload(norm), dresid = upload(resid);
  AffineQuantWeight w2;  // [2n, k]: gate rows then up rows
  w2.packed = dp.as<uint32_t>();
  w2.scales = ds.data();
  w2.biases = db.data();
  w2.n = 2 * c.n;
  w2.k = c.k;
  w2.bits = c.bits;
  w2.group_size = 64;
  AffineQuantWeight w1 = w2;  // the gate half alone
  w1.n = c.n;
  cudaStream_t st = ctx_->stream();

  // Unfused references.
  DeviceBuffer xn = poisoned<Bf16>(static_cast<size_t>(c.m) * c.k);
  ASSERT_EQ(rmsnorm_residual(nullptr, c.k, dx.as<Bf16>(), c.k, dnorm.as<Bf16>(), 0.0f, 1e-5f,
                             xn.as<Bf16>(), c.k, c.m, c.k, st),
            cudaSuccess);
  DeviceBuffer y_norm_ref = poisoned<Bf16>(static_cast<size_t>(c.m) * c.n);
  ASSERT_EQ(affine_gemv(w1, xn.as<Bf16>(), c.k, c.m, y_norm_ref.data(), c.n, false, sm_count(), st),
            cudaSuccess);
  DeviceBuffer y_plain = poisoned<Bf16>(static_cast<size_t>(c.m) * c.n);
  ASSERT_EQ(affine_gemv(w1, dx.as<Bf16>(), c.k, c.m, y_plain.data(), c.n, false, sm_count(), st),
            cudaSuccess);

  AffineGemvArgs a;
  a.w = w1;
  a.x = dx.as<Bf16>();
  a.ldx = c.k;
  a.ldy = c.n;
  a.m = c.m;
  a.sm_count = sm_count();
  const bool pdl_ok = ctx_->properties().major >= 9;
  for (bool pdl : {false, true}) {
    if (pdl && !pdl_ok) continue;
    SCOPED_TRACE(pdl ? "pdl" : "no pdl");
    a.pdl = pdl;
    // RMSNorm prologue.
    DeviceBuffer y = poisoned<Bf16>(static_cast<size_t>(c.m) * c.n);
    a.y = y.data();
    a.norm_weight = dnorm.as<Bf16>();
    a.epilogue = GemvEpilogue::kStore;
    ASSERT_TRUE(affine_gemv_supported(a));
    ASSERT_EQ(affine_gemv(a, st), cudaSuccess);
    EXPECT_EQ(bits16(download<Bf16>(y, c.m * c.n)), bits16(download<Bf16>(y_norm_ref, c.m * c.n)));
    // Residual add: y = resid + bf16(x · w).
    DeviceBuffer yr = upload(resid);
    a.y = yr.data();
    a.norm_weight = nullptr;
    a.epilogue = GemvEpilogue::kResidualAdd;
    ASSERT_EQ(affine_gemv(a, st), cudaSuccess);
    auto plain = download<Bf16>(y_plain, c.m * c.n);
    std::vector<Bf16> want(plain.size());
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] = __float2bfloat16(__bfloat162float(resid[i]) + __bfloat162float(plain[i]));
    }
    EXPECT_EQ(bits16(download<Bf16>(yr, c.m * c.n)), bits16(want));
  }

  if (c.m <= 4) {  // gated SiLU
    DeviceBuffer gu = poisoned<Bf16>(static_cast<size_t>(c.m) * 2 * c.n);
    ASSERT_EQ(affine_gemv(w2, dx.as<Bf16>(), c.k, c.m, gu.data(), 2 * c.n, false, sm_count(), st),
              cudaSuccess);
    DeviceBuffer act_ref = poisoned<Bf16>(static_cast<size_t>(c.m) * c.n);
    ASSERT_EQ(gated_activation(GatedActivation::kSilu, gu.as<Bf16>(), 2 * c.n, gu.as<Bf16>() + c.n,
                               2 * c.n, act_ref.as<Bf16>(), c.n, c.m, c.n, st),
              cudaSuccess);
    DeviceBuffer act = poisoned<Bf16>(static_cast<size_t>(c.m) * c.n);
    a.w = w2;
    a.y = act.data();
    a.epilogue = GemvEpilogue::kGatedSilu;
    a.pdl = pdl_ok;
    ASSERT_EQ(affine_gemv(a, st), cudaSuccess);
    auto got = from_bf16(download<Bf16>(act, c.m * c.n));
    auto ref = from_bf16(download<Bf16>(act_ref, c.m * c.n));
    EXPECT_LT(relative_error(got, std::vector<double>(ref.begin(), ref.end())), 8e-3);
    // The tensor-core kernel on the weight tiled in gated pairs (kTiledGated): the gate's
    // bits, and per-row stores through it the plain [gate | up] GEMV's bits.
    AffineGemvArgs tc = a;
    tc.kernel = AffineGemvKernel::kTensorCore;
    if (affine_gemv_supported(tc)) {
      ASSERT_EQ(affine_gemv(tc, st), cudaSuccess);
      const auto want_gate = bits16(download<Bf16>(act, c.m * c.n));
      DeviceBuffer tiled_buf;
      tc.w = tiled_copy(*ctx_, w2, AffineLayout::kTiledGated, 0, tiled_buf);
      DeviceBuffer act_tiled = poisoned<Bf16>(static_cast<size_t>(c.m) * c.n);
      tc.y = act_tiled.data();
      tc.block_warps = 8;  // the row-major kernel's warps: its summation order
      ASSERT_TRUE(affine_gemv_supported(tc));
      ASSERT_EQ(affine_gemv(tc, st), cudaSuccess);
      EXPECT_EQ(bits16(download<Bf16>(act_tiled, c.m * c.n)), want_gate) << "tiled gate";
      // 16 warps a block (one x row; more keep 8): the warps' sums in another order, so the
      // gate within that rounding (an f32 sum reordered, then bf16) of the 8-warp bits.
      DeviceBuffer act_wide = poisoned<Bf16>(static_cast<size_t>(c.m) * c.n);
      tc.y = act_wide.data();
      tc.block_warps = 16;
      ASSERT_EQ(affine_gemv(tc, st), cudaSuccess);
      const auto wide = download<Bf16>(act_wide, c.m * c.n);
      const auto wide_bits = bits16(wide);
      EXPECT_EQ(std::count(wide_bits.begin(), wide_bits.end(), uint16_t{0xffff}), 0);
      auto gate = from_bf16(download<Bf16>(act_tiled, c.m * c.n));
      EXPECT_LT(relative_error(from_bf16(wide), std::vector<double>(gate.begin(), gate.end())),
                4e-3)
          << "tiled gate, 16 warps";
      tc.block_warps = 0;
      AffineGemvArgs rows = tc;
      rows.norm_weight = nullptr;
      rows.epilogue = GemvEpilogue::kStore;
      rows.ldy = 2 * c.n;
      DeviceBuffer gu_tiled = poisoned<Bf16>(static_cast<size_t>(c.m) * 2 * c.n);
      rows.y = gu_tiled.data();
      ASSERT_TRUE(affine_gemv_supported(rows));
      ASSERT_EQ(affine_gemv(rows, st), cudaSuccess);
      AffineGemvArgs plain = rows;
      plain.w = w2;
      DeviceBuffer gu_plain = poisoned<Bf16>(static_cast<size_t>(c.m) * 2 * c.n);
      plain.y = gu_plain.data();
      ASSERT_EQ(affine_gemv(plain, st), cudaSuccess);
      EXPECT_EQ(bits16(download<Bf16>(gu_tiled, c.m * 2 * c.n)),
                bits16(download<Bf16>(gu_plain, c.m * 2 * c.n)))
          << "per-row stores through gated tiles";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AffineFusedTest,
                         ::testing::Values(FusedCase{4, 14336, 4096, 1},
                                           FusedCase{4, 2048, 4096, 3}, FusedCase{8, 1000, 4160, 2},
                                           FusedCase{4, 300, 14336, 6},
                                           FusedCase{8, 4096, 1024, 4}));

// The tensor-core kernel's RoPE + KV write epilogue against its plain store followed by
// rope_kv_write: a RoPE pair (rows i, i + head_dim / 2) is one tile row pair, summed as the
// plain tile sums each row, so the bits must match; graph replay must give the eager bits.
struct AffineRopeCase {
  int m, q_heads, kv_heads, head_dim, k;
  bool norm, pdl;
};
class AffineRopeTest : public CudaTest, public ::testing::WithParamInterface<AffineRopeCase> {};

TEST_P(AffineRopeTest, MatchesGemvThenRopeKvWrite) {
  const AffineRopeCase c = GetParam();
  const int n = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
  const int64_t ld_q = static_cast<int64_t>(c.q_heads) * c.head_dim + 16;
  const int num_slots = 48;
  const size_t cache_elems = static_cast<size_t>(num_slots) * c.kv_heads * c.head_dim;
  const std::vector<int32_t> positions = {129, 131000, 7, 4095};  // 131000: sincosf slow path
  const std::vector<int64_t> slots = {5, -1, 47, 0};              // -1: no K/V write
  auto table = rope_frequencies(500000.0, c.head_dim, {});
  ASSERT_TRUE(table.ok());
  std::mt19937 rng(71);
  std::vector<uint32_t> packed(static_cast<size_t>(n) * c.k / 8);
  for (uint32_t& v : packed) v = rng();
  const int groups = c.k / 64;
  auto scales = to_bf16(random_bf16_values(static_cast<size_t>(n) * groups, 72, 0.01f));
  auto biases = to_bf16(random_bf16_values(static_cast<size_t>(n) * groups, 73, 0.08f));
  auto x = to_bf16(random_bf16_values(static_cast<size_t>(c.m) * c.k, 74, 2.0f));
  auto norm = to_bf16(random_bf16_values(c.k, 75, 1.0f));
  DeviceBuffer dp = upload(packed), ds = upload(scales), db = upload(biases);
  DeviceBuffer dx = upload(x), dnorm = upload(norm);
  DeviceBuffer dpos = upload(std::vector<int32_t>(positions.begin(), positions.begin() + c.m));
  DeviceBuffer dslots = upload(std::vector<int64_t>(slots.begin(), slots.begin() + c.m));
  DeviceBuffer dfreq = upload(table->inv_freq);
  cudaStream_t st = ctx_->stream();

  AffineGemvArgs g;
  g.w.packed = dp.as<uint32_t>();
  g.w.scales = ds.data();
  g.w.biases = db.data();
  g.w.n = n;
  g.w.k = c.k;
  g.w.bits = 4;
  g.w.group_size = 64;
  g.x = dx.as<Bf16>();
  g.ldx = c.k;
  g.norm_weight = c.norm ? dnorm.as<Bf16>() : nullptr;
  g.m = c.m;
  g.sm_count = sm_count();
  g.pdl = c.pdl && ctx_->properties().major >= 9;
  g.kernel = AffineGemvKernel::kTensorCore;
  RopeKvWriteArgs r;
  r.ld_qkv = n;
  r.positions = dpos.as<int32_t>();
  r.slots = dslots.as<int64_t>();
  r.inv_freq = dfreq.as<float>();
  r.attention_scaling = 1.125f;
  r.ld_q_out = ld_q;
  r.tokens = c.m;
  r.q_heads = c.q_heads;
  r.kv_heads = c.kv_heads;
  r.head_dim = c.head_dim;
  r.rotary_dim = c.head_dim;

  DeviceBuffer qkv = poisoned<Bf16>(size_t(c.m) * n);
  DeviceBuffer want_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer want_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer want_v = poisoned<Bf16>(cache_elems);
  AffineGemvArgs plain = g;
  plain.y = qkv.data();
  plain.ldy = n;
  ASSERT_TRUE(affine_gemv_supported(plain));
  ASSERT_EQ(affine_gemv(plain, st), cudaSuccess);
  RopeKvWriteArgs ur = r;
  ur.qkv = qkv.as<Bf16>();
  ur.q_out = want_q.as<Bf16>();
  ur.k_cache = want_k.as<Bf16>();
  ur.v_cache = want_v.as<Bf16>();
  ASSERT_EQ(rope_kv_write(ur, st), cudaSuccess);

  auto run_fused = [&](bool graph, DeviceBuffer& q, DeviceBuffer& kc, DeviceBuffer& vc) {
    AffineGemvArgs f = g;
    f.epilogue = GemvEpilogue::kRopeKvWrite;
    f.rope = r;
    f.rope.q_out = q.as<Bf16>();
    f.rope.k_cache = kc.as<Bf16>();
    f.rope.v_cache = vc.as<Bf16>();
    ASSERT_TRUE(affine_gemv_supported(f));
    AffineGemvArgs reg = f;
    reg.kernel = AffineGemvKernel::kRegister;
    EXPECT_FALSE(affine_gemv_supported(reg));
    if (!graph) {
      ASSERT_EQ(affine_gemv(f, st), cudaSuccess);
      return;
    }
    cudaGraph_t gr = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(affine_gemv(f, st), cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(st, &gr), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, gr, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_TRUE(ctx_->synchronize().ok());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(gr);
  };
  DeviceBuffer got_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer got_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer got_v = poisoned<Bf16>(cache_elems);
  run_fused(false, got_q, got_k, got_v);
  DeviceBuffer rep_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer rep_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer rep_v = poisoned<Bf16>(cache_elems);
  run_fused(true, rep_q, rep_k, rep_v);
  // The weight tiled in RoPE pairs (kTiledRope): the same bits, eager, with the 8 warps a
  // block the row-major kernel has.
  DeviceBuffer tiled_buf;
  const AffineQuantWeight row_major = g.w;
  g.w = tiled_copy(*ctx_, row_major, AffineLayout::kTiledRope, c.head_dim, tiled_buf);
  g.block_warps = 8;
  DeviceBuffer til_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer til_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer til_v = poisoned<Bf16>(cache_elems);
  run_fused(false, til_q, til_k, til_v);
  // 16 warps a block (one x row; more rows keep 8): the warps' sums in another order, so
  // within f32 reordering of those bits (one bf16 rounding apart at most), the same
  // elements written, and graph replay the eager bits.
  g.block_warps = 16;
  DeviceBuffer w16_q = poisoned<Bf16>(c.m * ld_q), w16r_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer w16_k = poisoned<Bf16>(cache_elems), w16r_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer w16_v = poisoned<Bf16>(cache_elems), w16r_v = poisoned<Bf16>(cache_elems);
  run_fused(false, w16_q, w16_k, w16_v);
  run_fused(true, w16r_q, w16r_k, w16r_v);
  g.block_warps = 0;
  // ... and its per-row stores (the unfused qkv GEMV on it) the plain store's bits.
  DeviceBuffer qkv_tiled = poisoned<Bf16>(size_t(c.m) * n);
  AffineGemvArgs tiled_plain = plain;
  tiled_plain.w = g.w;
  tiled_plain.y = qkv_tiled.data();
  ASSERT_TRUE(affine_gemv_supported(tiled_plain));
  ASSERT_EQ(affine_gemv(tiled_plain, st), cudaSuccess);
  EXPECT_EQ(bits16(download<Bf16>(qkv_tiled, size_t(c.m) * n)),
            bits16(download<Bf16>(qkv, size_t(c.m) * n)))
      << "per-row stores through RoPE tiles";
  struct Out {
    const char* what;
    DeviceBuffer *want, *got, *replay, *tiled, *wide, *wide_replay;
    size_t elems;
  };
  Out outs[] = {{"q", &want_q, &got_q, &rep_q, &til_q, &w16_q, &w16r_q, size_t(c.m) * ld_q},
                {"k cache", &want_k, &got_k, &rep_k, &til_k, &w16_k, &w16r_k, cache_elems},
                {"v cache", &want_v, &got_v, &rep_v, &til_v, &w16_v, &w16r_v, cache_elems}};
  for (const Out& o : outs) {
    auto want = bits16(download<Bf16>(*o.want, o.elems));
    EXPECT_EQ(bits16(download<Bf16>(*o.got, o.elems)), want) << o.what << ": not bit-identical";
    EXPECT_EQ(bits16(download<Bf16>(*o.replay, o.elems)), want) << o.what << ": graph replay";
    EXPECT_EQ(bits16(download<Bf16>(*o.tiled, o.elems)), want) << o.what << ": tiled layout";
    const auto wide = download<Bf16>(*o.wide, o.elems);
    EXPECT_EQ(bits16(download<Bf16>(*o.wide_replay, o.elems)), bits16(wide))
        << o.what << ": 16 warps, graph replay";
    const auto want_values = from_bf16(download<Bf16>(*o.want, o.elems));
    const auto wide_values = from_bf16(wide);
    const auto wide_bits = bits16(wide);
    // A pair rotated after its bf16 rounding: an ulp of either input, up to the largest
    // output's 2^-7 each, can land on an output near zero.
    float largest = 0.0f;
    for (size_t i = 0; i < o.elems; ++i) {
      if (want[i] != 0xffff) largest = std::max(largest, std::abs(want_values[i]));
    }
    for (size_t i = 0; i < o.elems; ++i) {
      if (want[i] == 0xffff || wide_bits[i] == 0xffff) {  // unwritten (poison) in both, or bad
        ASSERT_EQ(wide_bits[i], want[i]) << o.what << ": 16 warps, element " << i;
        continue;
      }
      ASSERT_NEAR(wide_values[i], want_values[i],
                  std::abs(want_values[i]) / 128.0f + largest / 64.0f + 1e-6f)
          << o.what << ": 16 warps, element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AffineRopeTest,
                         ::testing::Values(AffineRopeCase{1, 32, 8, 128, 4096, true, true},
                                           AffineRopeCase{3, 4, 2, 64, 768, false, false},
                                           AffineRopeCase{4, 6, 1, 32, 512, true, true}));

TEST_F(CudaTest, AffineFusedRejectsUnsupported) {
  DeviceBuffer packed = poisoned<uint32_t>(64 * 1024 / 8);
  DeviceBuffer sb = poisoned<Bf16>(64 * 16 * 2);
  DeviceBuffer x = poisoned<Bf16>(8 * 1024);
  DeviceBuffer y = poisoned<float>(8 * 64);
  AffineGemvArgs a;
  a.w.packed = packed.as<uint32_t>();
  a.w.scales = sb.data();
  a.w.biases = sb.as<Bf16>() + 64 * 16;
  a.w.n = 64;
  a.w.k = 1024;
  a.x = x.as<Bf16>();
  a.ldx = 1024;
  a.y = y.data();
  a.ldy = 64;
  a.m = 1;
  a.sm_count = 1;
  EXPECT_TRUE(affine_gemv_supported(a));
  a.m = 9;  // more rows than kAffineGemvMaxRows
  EXPECT_FALSE(affine_gemv_supported(a));
  a.m = 5;
  a.epilogue = GemvEpilogue::kGatedSilu;  // gated: at most 4 rows
  EXPECT_FALSE(affine_gemv_supported(a));
  a.m = 1;
  a.y_f32 = true;  // gated and residual-add outputs are bf16
  EXPECT_FALSE(affine_gemv_supported(a));
  a.epilogue = GemvEpilogue::kResidualAdd;
  EXPECT_FALSE(affine_gemv_supported(a));
  a.y_f32 = false;
  a.ldx = 1020;  // rows must be 16-byte aligned
  EXPECT_FALSE(affine_gemv_supported(a));
  EXPECT_EQ(affine_gemv(a, ctx_->stream()), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace hearth::cuda::testing
