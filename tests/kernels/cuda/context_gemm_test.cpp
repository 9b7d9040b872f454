// DeviceContext's budgeted allocator and the cuBLASLt bf16 GEMM against a float64 product
// of the same bf16 inputs; the fused decode GEMV against the unfused kernels it replaces.
#include <cstring>

#include "kernels/cuda/bias_add.cuh"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/rmsnorm.cuh"
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
  const GemmProblem p = gemm_problem(c.m, c.n, c.k, c.pad_x, c.pad_w, c.pad_y, c.accumulate, 1);
  DeviceBuffer dx = upload(to_bf16(p.x));
  DeviceBuffer dw = upload(to_bf16(p.w));
  GemmBf16 gemm(*ctx_);
  GemmShape shape{c.m, c.n, c.k, p.ldx, p.ldw, p.ldy, c.out, c.accumulate};
  std::vector<float> got;  // [m, n]
  if (c.out == GemmOut::kF32) {
    DeviceBuffer dy = upload(p.y0);
    ASSERT_TRUE(gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dy.data()).ok());
    auto y = download<float>(dy, p.y0.size());
    got = packed_rows(y, c.m, c.n, p.ldy);
    EXPECT_LT(relative_error(got, p.ref), 1e-4);
  } else {
    DeviceBuffer dy = upload(to_bf16(p.y0));
    ASSERT_TRUE(gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dy.data()).ok());
    auto y = from_bf16(download<__nv_bfloat16>(dy, p.y0.size()));
    got = packed_rows(y, c.m, c.n, p.ldy);
    EXPECT_LT(relative_error(got, p.ref), 4e-3);
    // The padding between rows is untouched.
    if (c.pad_y > 0) {
      EXPECT_EQ(y[c.n], p.y0[c.n]);
    }
  }
  // A second run reuses the cached plan and gives the same bits.
  if (!c.accumulate && c.out == GemmOut::kBf16) {
    DeviceBuffer again = poisoned<__nv_bfloat16>(p.y0.size());
    ASSERT_TRUE(gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), again.data()).ok());
    auto y2 = from_bf16(download<__nv_bfloat16>(again, p.y0.size()));
    const std::vector<float> again_rows = packed_rows(y2, c.m, c.n, p.ldy);
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(again_rows[k], got[k]) << k / c.n << " " << k % c.n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest,
                         ::testing::Values(GemmCase{1, 769, 5125, 0, 0, 0, GemmOut::kBf16, false},
                                           GemmCase{7, 769, 512, 8, 16, 8, GemmOut::kBf16, false},
                                           GemmCase{129, 5125, 256, 0, 0, 3, GemmOut::kF32, false},
                                           GemmCase{33, 1024, 769, 5, 0, 0, GemmOut::kBf16, true},
                                           GemmCase{2, 5125, 1024, 0, 0, 0, GemmOut::kF32, true},
                                           // m <= 2 with k, ld multiples of 8: the gemv_bf16 path
                                           // (3 and 4: cuBLASLt, kGemvRoutedMaxRows)
                                           GemmCase{1, 769, 4096, 8, 8, 3, GemmOut::kBf16, false},
                                           GemmCase{1, 5125, 1024, 0, 0, 0, GemmOut::kF32, false},
                                           GemmCase{3, 1024, 2048, 8, 0, 1, GemmOut::kBf16, true},
                                           GemmCase{4, 769, 5120, 0, 0, 0, GemmOut::kBf16, false}));

TEST_F(CudaTest, GemmRejectsBadShapes) {
  GemmBf16 gemm(*ctx_);
  GemmShape shape{4, 8, 16, 8, 16, 8, GemmOut::kBf16, false};
  EXPECT_EQ(gemm.run(shape, nullptr, nullptr, nullptr).code(), ErrorCode::kInvalidArgument);
}

// Every cuBLASLt candidate of a shape computes the product (the lab times them); choose()
// refuses an index past the candidates.
TEST_F(CudaTest, GemmCandidatesAllMatchReference) {
  const int m = 64, n = 1000, k = 1024;
  auto x = random_bf16_values(size_t(m) * k, 41);
  auto w = random_bf16_values(size_t(n) * k, 42, 0.05f);
  const std::vector<double> ref = reference_gemm(x, k, w, k, m, n, k);
  DeviceBuffer dx = upload(to_bf16(x));
  DeviceBuffer dw = upload(to_bf16(w));
  GemmBf16Options cublas;
  cublas.wgmma = false;
  GemmBf16 gemm(*ctx_, cublas);
  GemmShape shape{m, n, k, k, k, n, GemmOut::kBf16, false};
  auto count = gemm.candidates(shape);
  ASSERT_TRUE(count.ok());
  ASSERT_GE(*count, 1);
  ASSERT_LE(*count, GemmBf16::kMaxCandidates);
  for (int i = 0; i < *count; ++i) {
    ASSERT_TRUE(gemm.choose(shape, i).ok());
    DeviceBuffer dy = poisoned<__nv_bfloat16>(ref.size());
    ASSERT_TRUE(gemm.run(shape, dx.as<__nv_bfloat16>(), dw.as<__nv_bfloat16>(), dy.data()).ok());
    EXPECT_LT(relative_error(from_bf16(download<__nv_bfloat16>(dy, ref.size())), ref), 4e-3)
        << "candidate " << i;
  }
  EXPECT_EQ(gemm.choose(shape, *count).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(gemm.choose(shape, -1).code(), ErrorCode::kInvalidArgument);
}

using Bf16 = __nv_bfloat16;

struct FusedCase {
  int m, n, k, pad;
  GemvEpilogue epilogue;
  bool norm, bias, f32;
  int split;
  bool pdl;
};

class GemvFusedTest : public CudaTest, public ::testing::WithParamInterface<FusedCase> {
 protected:
  static bool gated(GemvEpilogue e) {
    return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
  }
};

std::vector<uint8_t> bytes_of(const std::vector<float>& f32, const std::vector<Bf16>& bf) {
  std::vector<uint8_t> out(f32.size() * 4 + bf.size() * 2);
  if (!f32.empty()) std::memcpy(out.data(), f32.data(), f32.size() * 4);
  if (!bf.empty()) std::memcpy(out.data(), bf.data(), bf.size() * 2);
  return out;
}

// The fused GEMV against the kernels it replaces, run on the same inputs: rmsnorm_residual
// (norm prologue), the unfused gemv_bf16, bias_add, then rmsnorm_residual's residual add or
// gated_activation. With split 1 the summation order is the unfused one, so the bits must
// match exactly; splits 2 and 4 reorder the f32 sum, which may move a bf16 rounding by one
// ulp (2^-8 relative), so they are held to 4e-3 RMS relative error. A graph-captured replay
// must give the eager bits.
TEST_P(GemvFusedTest, MatchesUnfusedKernels) {
  const FusedCase c = GetParam();
  const int64_t ldx = c.k + c.pad;
  const int64_t ldw = c.k + c.pad;
  const int64_t ldy = c.n + c.pad;
  const bool pair = gated(c.epilogue);
  const int wrows = pair ? 2 * c.n : c.n;
  auto x = random_bf16_values(c.m * ldx, 41, c.norm ? 3.0f : 1.0f);
  auto w = random_bf16_values(size_t(wrows) * ldw, 42, 0.05f);
  auto y0 = random_bf16_values(c.m * ldy, 43);
  auto bias = random_bf16_values(wrows, 44);
  auto norm_w = random_bf16_values(c.k, 45, 0.5f);
  DeviceBuffer dx = upload(to_bf16(x));
  DeviceBuffer dw = upload(to_bf16(w));
  DeviceBuffer dbias = upload(to_bf16(bias));
  DeviceBuffer dnorm = upload(to_bf16(norm_w));
  cudaStream_t st = ctx_->stream();

  // Unfused.
  const Bf16* xin = dx.as<Bf16>();
  DeviceBuffer xn = poisoned<Bf16>(c.m * ldx);
  if (c.norm) {
    DeviceBuffer xcopy = upload(to_bf16(x));  // rmsnorm_residual takes a mutable residual
    ASSERT_EQ(rmsnorm_residual(nullptr, ldx, xcopy.as<Bf16>(), ldx, dnorm.as<Bf16>(), 0.25f, 1e-5f,
                               xn.as<Bf16>(), ldx, c.m, c.k, st),
              cudaSuccess);
    xin = xn.as<Bf16>();
  }
  const int64_t ldt = wrows;
  DeviceBuffer tmp = c.f32 ? upload(y0) : upload(to_bf16(y0));
  if (c.epilogue != GemvEpilogue::kAccumulate) tmp = poisoned<float>(c.m * ldt);
  const bool acc = c.epilogue == GemvEpilogue::kAccumulate;
  ASSERT_EQ(gemv_bf16(xin, ldx, dw.as<Bf16>(), ldw, tmp.data(), acc ? ldy : ldt, c.f32, acc, c.m,
                      wrows, c.k, sm_count(), st),
            cudaSuccess);
  if (c.bias) {
    ASSERT_EQ(bias_add(tmp.as<Bf16>(), ldt, dbias.as<Bf16>(), c.m, wrows, st), cudaSuccess);
  }
  DeviceBuffer want = c.f32 ? upload(y0) : upload(to_bf16(y0));
  DeviceBuffer scratch = poisoned<Bf16>(c.m * ldy);
  switch (c.epilogue) {
    case GemvEpilogue::kStore:
      for (int r = 0; r < c.m; ++r) {
        ASSERT_EQ(cudaMemcpy(static_cast<char*>(want.data()) + r * ldy * (c.f32 ? 4 : 2),
                             static_cast<char*>(tmp.data()) + r * ldt * (c.f32 ? 4 : 2),
                             c.n * (c.f32 ? 4 : 2), cudaMemcpyDeviceToDevice),
                  cudaSuccess);
      }
      break;
    case GemvEpilogue::kAccumulate:
      want = std::move(tmp);
      break;
    case GemvEpilogue::kResidualAdd: {
      // rmsnorm_residual's residual update (its normalized output is not used here).
      DeviceBuffer ones = upload(to_bf16(std::vector<float>(c.n, 1.0f)));
      ASSERT_EQ(rmsnorm_residual(tmp.as<Bf16>(), ldt, want.as<Bf16>(), ldy, ones.as<Bf16>(), 0.0f,
                                 1e-5f, scratch.as<Bf16>(), ldy, c.m, c.n, st),
                cudaSuccess);
      break;
    }
    case GemvEpilogue::kRopeKvWrite:  // decode_fusion_test.cpp
      FAIL() << "not a case of this test";
    case GemvEpilogue::kGatedSilu:
    case GemvEpilogue::kGatedGeluTanh:
      ASSERT_EQ(
          gated_activation(c.epilogue == GemvEpilogue::kGatedSilu ? GatedActivation::kSilu
                                                                  : GatedActivation::kGeluTanh,
                           tmp.as<Bf16>(), ldt, tmp.as<Bf16>() + c.n, ldt, want.as<Bf16>(), ldy,
                           c.m, c.n, st),
          cudaSuccess);
      break;
  }

  // Fused.
  DeviceBuffer got = c.f32 ? upload(y0) : upload(to_bf16(y0));
  GemvArgs a;
  a.x = dx.as<Bf16>();
  a.ldx = ldx;
  a.w = dw.as<Bf16>();
  a.ldw = ldw;
  a.bias = c.bias ? dbias.as<Bf16>() : nullptr;
  a.y = got.data();
  a.ldy = ldy;
  a.y_f32 = c.f32;
  a.epilogue = c.epilogue;
  a.norm_weight = c.norm ? dnorm.as<Bf16>() : nullptr;
  a.norm_offset = 0.25f;
  a.norm_eps = 1e-5f;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.sm_count = sm_count();
  a.split = c.split;
  a.pdl = c.pdl && ctx_->properties().major >= 9;
  a.l2_prefetch = (c.m + c.split) % 2;  // never changes the bits; the cases cover 0 and 1
  // An L2 prefetch of another range after the rows changes nothing either.
  a.prefetch = dx.data();
  a.prefetch_bytes = c.n % 2 == 1 ? x.size() * 2 : 0;
  ASSERT_TRUE(gemv_bf16_supported(a));
  ASSERT_EQ(gemv_bf16(a, st), cudaSuccess);

  const size_t total = size_t(c.m) * ldy;
  std::vector<float> got_f, want_f;
  if (c.f32) {
    got_f = download<float>(got, total);
    want_f = download<float>(want, total);
  } else {
    got_f = from_bf16(download<Bf16>(got, total));
    want_f = from_bf16(download<Bf16>(want, total));
  }
  std::vector<float> g;
  std::vector<double> r;
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      g.push_back(got_f[i * ldy + j]);
      r.push_back(want_f[i * ldy + j]);
    }
    for (int64_t j = c.n; j < ldy; ++j) {  // row padding untouched
      ASSERT_EQ(std::memcmp(&got_f[i * ldy + j], &want_f[i * ldy + j], 4), 0);
    }
  }
  if (c.split == 1) {
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_TRUE(g[i] == static_cast<float>(r[i]) || (std::isnan(g[i]) && std::isnan(r[i])))
          << "element " << i << ": " << g[i] << " vs " << r[i];
    }
  } else {
    EXPECT_LT(relative_error(g, r), 4e-3);
  }

  // Graph replay gives the eager bits.
  DeviceBuffer replay = c.f32 ? upload(y0) : upload(to_bf16(y0));
  a.y = replay.data();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(gemv_bf16(a, st), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
  const size_t elem = c.f32 ? 4 : 2;
  std::vector<uint8_t> eager_bits(total * elem), graph_bits(total * elem);
  ASSERT_TRUE(ctx_->synchronize().ok());
  ASSERT_EQ(cudaMemcpy(eager_bits.data(), got.data(), total * elem, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(graph_bits.data(), replay.data(), total * elem, cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_EQ(eager_bits, graph_bits);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GemvFusedTest,
    ::testing::Values(
        FusedCase{1, 769, 4104, 8, GemvEpilogue::kStore, true, false, false, 1, true},
        FusedCase{4, 5125, 1032, 0, GemvEpilogue::kResidualAdd, false, true, false, 1, false},
        FusedCase{3, 769, 520, 8, GemvEpilogue::kGatedSilu, true, true, false, 2, true},
        FusedCase{2, 1000, 2056, 0, GemvEpilogue::kGatedGeluTanh, false, false, false, 1, true},
        FusedCase{1, 5125, 1032, 0, GemvEpilogue::kStore, false, false, true, 4, true},
        FusedCase{4, 769, 4104, 8, GemvEpilogue::kAccumulate, false, false, true, 1, false},
        FusedCase{2, 4099, 4096, 0, GemvEpilogue::kResidualAdd, true, false, false, 4, true},
        FusedCase{1, 4096, 14336, 0, GemvEpilogue::kResidualAdd, false, false, false, 1, true},
        FusedCase{1, 3000, 4096, 0, GemvEpilogue::kGatedSilu, true, false, false, 1, true}));

// A PDL-launched GEMV that reads what the previous GEMV wrote: the wait on the previous grid
// must come before x is read, so the chained result equals the serial one.
TEST_F(CudaTest, PdlChainedGemvsSeeThePreviousOutput) {
  const int k = 4096, n1 = 4096, n2 = 6144;
  auto x = random_bf16_values(k, 51);
  auto w1 = random_bf16_values(size_t(n1) * k, 52, 0.05f);
  auto w2 = random_bf16_values(size_t(n2) * n1, 53, 0.05f);
  DeviceBuffer dx = upload(to_bf16(x));
  DeviceBuffer dw1 = upload(to_bf16(w1));
  DeviceBuffer dw2 = upload(to_bf16(w2));
  auto run = [&](bool pdl) {
    DeviceBuffer h = poisoned<Bf16>(n1);
    DeviceBuffer out = poisoned<Bf16>(n2);
    GemvArgs a;
    a.m = 1;
    a.sm_count = sm_count();
    a.pdl = pdl && ctx_->properties().major >= 9;
    for (int rep = 0; rep < 3; ++rep) {
      EXPECT_EQ(cudaMemsetAsync(h.data(), 0xff, n1 * 2, ctx_->stream()), cudaSuccess);
      a.x = dx.as<Bf16>();
      a.ldx = k;
      a.w = dw1.as<Bf16>();
      a.ldw = k;
      a.y = h.data();
      a.ldy = n1;
      a.n = n1;
      a.k = k;
      EXPECT_EQ(gemv_bf16(a, ctx_->stream()), cudaSuccess);
      a.x = h.as<Bf16>();
      a.ldx = n1;
      a.w = dw2.as<Bf16>();
      a.ldw = n1;
      a.y = out.data();
      a.ldy = n2;
      a.n = n2;
      a.k = n1;
      EXPECT_EQ(gemv_bf16(a, ctx_->stream()), cudaSuccess);
    }
    return from_bf16(download<Bf16>(out, n2));
  };
  auto serial = run(false);
  auto chained = run(true);
  for (int i = 0; i < n2; ++i) {
    ASSERT_FALSE(std::isnan(serial[i]));
    ASSERT_EQ(chained[i], serial[i]) << "element " << i;
  }
}

TEST_F(CudaTest, FusedGemvRejectsUnsupportedArguments) {
  GemvArgs a;
  a.m = 1;
  a.n = 8;
  a.k = 16;
  EXPECT_FALSE(gemv_bf16_supported(a));  // null pointers
  EXPECT_EQ(gemv_bf16(a, ctx_->stream()), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace hearth::cuda::testing
