// cuBLASLt bf16 GEMM with cached plans. Row-major y = x·wᵀ is, in cuBLAS's column-major
// terms, Yc[n, m] = Wc[k, n]ᵀ · Xc[k, m]: A = w (transposed), B = x, C = D = y.
#include "kernels/cuda/gemm_bf16.h"

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/gemv_bf16.cuh"

namespace hearth::cuda {
namespace {

// Counters a split-K launch may need: its tiles number fewer than the block slots.
constexpr int kSkinnyCounters = 1024;

}  // namespace

GemmBf16Options GemmBf16Options::from_env() {
  GemmBf16Options options;
  const char* env = std::getenv("HEARTH_SKINNY_GEMM");
  if (env != nullptr && std::strcmp(env, "0") == 0) options.skinny = false;
  if (env != nullptr && std::strcmp(env, "1") == 0) options.skinny = true;
  return options;
}

bool skinny_gemm_routed(int m, int n, int k) {
  (void)n;
  (void)k;
  return m >= kSkinnyMinRoutedRows && m <= kSkinnyMaxRoutedRows;
}

GemmBf16::GemmBf16(DeviceContext& ctx, GemmBf16Options options) : ctx_(&ctx), options_(options) {
  if (!options_.skinny) return;
  auto counters = ctx.allocate(kSkinnyCounters * sizeof(unsigned), "skinny GEMM counters");
  // On the context's stream: its GEMMs are ordered after the zeroing (it does not wait for
  // the legacy stream a plain cudaMemset runs on).
  if (counters.ok() && cudaMemsetAsync(counters->data(), 0, kSkinnyCounters * sizeof(unsigned),
                                       ctx.stream()) == cudaSuccess) {
    skinny_counters_ = std::move(counters).value();
  }
}

GemmBf16::~GemmBf16() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
}

Result<const GemmBf16::Plan*> GemmBf16::plan_for(const GemmShape& s) {
  Key key{s.m, s.n, s.k, s.ldx, s.ldw, s.ldy, static_cast<int>(s.out), s.accumulate};
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;

  Plan plan;
  cudaDataType_t out_type = s.out == GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  HEARTH_RETURN_IF_ERROR(cublas_status(
      cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "GEMM descriptor"));
  cublasOperation_t trans_a = CUBLAS_OP_T;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  HEARTH_RETURN_IF_ERROR(
      cublas_status(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                   sizeof(trans_a)),
                    "GEMM transa"));
  HEARTH_RETURN_IF_ERROR(
      cublas_status(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                   sizeof(trans_b)),
                    "GEMM transb"));
  HEARTH_RETURN_IF_ERROR(cublas_status(
      cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, s.k, s.n, s.ldw), "GEMM layout of w"));
  HEARTH_RETURN_IF_ERROR(cublas_status(
      cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, s.k, s.m, s.ldx), "GEMM layout of x"));
  HEARTH_RETURN_IF_ERROR(cublas_status(
      cublasLtMatrixLayoutCreate(&plan.c, out_type, s.n, s.m, s.ldy), "GEMM layout of y"));

  cublasLtMatmulPreference_t pref = nullptr;
  HEARTH_RETURN_IF_ERROR(cublas_status(cublasLtMatmulPreferenceCreate(&pref), "GEMM preference"));
  size_t workspace = ctx_->workspace_size();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  cublasStatus_t err = cublasLtMatmulAlgoGetHeuristic(ctx_->cublaslt(), plan.desc, plan.a, plan.b,
                                                      plan.c, plan.c, pref, 1, &heuristic, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (err != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
    return unsupported_error("cuBLASLt has no bf16 GEMM for m={} n={} k={} (ld {} {} {})", s.m, s.n,
                             s.k, s.ldx, s.ldw, s.ldy);
  }
  plan.algo = heuristic.algo;
  return &plans_.emplace(key, plan).first->second;
}

Status GemmBf16::run(const GemmShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.ldx < s.k || s.ldw < s.k || s.ldy < s.n) {
    return invalid_argument_error("bad GEMM shape m={} n={} k={} ldx={} ldw={} ldy={}", s.m, s.n,
                                  s.k, s.ldx, s.ldw, s.ldy);
  }
  if (gemv_bf16_supported(s.m, s.n, s.k, x, s.ldx, w, s.ldw)) {
    return cuda_status(
        gemv_bf16(x, s.ldx, w, s.ldw, y, s.ldy, s.out == GemmOut::kF32, s.accumulate, s.m, s.n, s.k,
                  ctx_->properties().multiProcessorCount, ctx_->stream()),
        "bf16 GEMV");
  }
  if (options_.skinny && skinny_gemm_routed(s.m, s.n, s.k)) {
    SkinnyGemmArgs a;
    a.x = x;
    a.ldx = s.ldx;
    a.w = w;
    a.ldw = s.ldw;
    a.y = y;
    a.ldy = s.ldy;
    a.y_f32 = s.out == GemmOut::kF32;
    a.accumulate = s.accumulate;
    a.m = s.m;
    a.n = s.n;
    a.k = s.k;
    a.sm_count = ctx_->properties().multiProcessorCount;
    a.pdl = ctx_->properties().major >= 9;  // weight loads overlap the previous kernel's tail
    if (skinny_gemm_supported(a)) {
      SkinnyGemmPlan plan = skinny_gemm_plan(a);
      if (plan.splits > 1 &&
          (plan.partial_floats * sizeof(float) > ctx_->workspace_size() ||
           plan.counters > kSkinnyCounters || skinny_counters_.data() == nullptr)) {
        a.splits = 1;  // no room for the partials: one unit per tile
      }
      a.partials = static_cast<float*>(ctx_->workspace());
      a.counters = skinny_counters_.as<unsigned>();
      return cuda_status(skinny_gemm(a, ctx_->stream()), "skinny bf16 GEMM");
    }
  }
  HEARTH_ASSIGN_OR_RETURN(const Plan* plan, plan_for(s));
  float alpha = 1.0f;
  float beta = s.accumulate ? 1.0f : 0.0f;
  return cublas_status(cublasLtMatmul(ctx_->cublaslt(), plan->desc, &alpha, w, plan->a, x, plan->b,
                                      &beta, y, plan->c, y, plan->c, &plan->algo, ctx_->workspace(),
                                      ctx_->workspace_size(), ctx_->stream()),
                       "bf16 GEMM");
}

}  // namespace hearth::cuda
