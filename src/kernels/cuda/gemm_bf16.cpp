// cuBLASLt bf16 GEMM with cached plans. Row-major y = x·wᵀ is, in cuBLAS's column-major
// terms, Yc[n, m] = Wc[k, n]ᵀ · Xc[k, m]: A = w (transposed), B = x, C = D = y.
#include "kernels/cuda/gemm_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "base/log.h"
#include "kernels/cuda/gemv_bf16.cuh"

namespace hearth::cuda {
namespace {

// wgmma_gemm's counters: one a 128-row tile (a 256k-row vocabulary needs 2048).
constexpr int kWgmmaCounters = 4096;
constexpr int kWgmmaMinRoutedRows = 3;

// Zeroed counters on ctx's stream (its GEMMs are ordered after the zeroing: a plain
// cudaMemset runs on the legacy stream, which the context's stream does not wait for);
// empty, with a warning, when the allocation fails (the route then stays on cuBLASLt).
DeviceBuffer zeroed_counters(DeviceContext& ctx, int count, const char* what) {
  auto counters = ctx.allocate(count * sizeof(unsigned), what);
  if (!counters.ok() ||
      cudaMemsetAsync(counters->data(), 0, count * sizeof(unsigned), ctx.stream()) != cudaSuccess) {
    spdlog::warn("{}: {}; keeping cuBLASLt's route", what,
                 counters.ok() ? "zeroing failed" : counters.status().to_string());
    return DeviceBuffer();
  }
  return std::move(counters).value();
}

// The three matrix layouts of s (w, x, y in cuBLAS's column-major terms); with blocks > 1, a
// strided batch of `blocks` such problems: x and y blocks s.m rows apart, w shared (stride 0).
Status create_layouts(const GemmShape& s, int blocks, cublasLtMatrixLayout_t* a,
                      cublasLtMatrixLayout_t* b, cublasLtMatrixLayout_t* c) {
  const cudaDataType_t out_type = s.out == GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t type, int rows, int cols, int64_t ld,
                    int64_t stride, const char* what) -> Status {
    HEARTH_RETURN_IF_ERROR(
        cublas_status(cublasLtMatrixLayoutCreate(l, type, rows, cols, ld), what));
    if (blocks == 1) return ok_status();
    HEARTH_RETURN_IF_ERROR(
        cublas_status(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &blocks, sizeof(blocks)),
                      what));
    return cublas_status(
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                         sizeof(stride)),
        what);
  };
  HEARTH_RETURN_IF_ERROR(layout(a, CUDA_R_16BF, s.k, s.n, s.ldw, 0, "GEMM layout of w"));
  HEARTH_RETURN_IF_ERROR(layout(b, CUDA_R_16BF, s.k, s.m, s.ldx, s.m * s.ldx, "GEMM layout of x"));
  return layout(c, out_type, s.n, s.m, s.ldy, s.m * s.ldy, "GEMM layout of y");
}

void destroy_layouts(cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c) {
  for (cublasLtMatrixLayout_t l : {a, b, c}) {
    if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
  }
}

// One cuBLASLt call y = x·wᵀ (+ y when accumulate) with desc, the layouts a (w), b (x), c (y)
// and algo on ctx's stream and workspace.
Status matmul(DeviceContext& ctx, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, const cublasLtMatmulAlgo_t& algo,
              const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool accumulate,
              const char* what) {
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  return cublas_status(cublasLtMatmul(ctx.cublaslt(), desc, &alpha, w, a, x, b, &beta, y, c, y, c,
                                      &algo, ctx.workspace(), ctx.workspace_size(), ctx.stream()),
                       what);
}

}  // namespace

GemmBf16::Key GemmBf16::key_of(const GemmShape& s) {
  return Key{s.m, s.n, s.k, s.ldx, s.ldw, s.ldy, static_cast<int>(s.out), s.accumulate};
}

GemmBf16Options GemmBf16Options::from_env() {
  GemmBf16Options options;
  if (const char* form = std::getenv("HEARTH_INVARIANT_GEMM"); form != nullptr && *form != '\0') {
    if (std::strcmp(form, "unsplit") == 0) {
      options.invariant_form = GemmBf16Options::InvariantForm::kUnsplit;
    } else if (std::strcmp(form, "batched") == 0) {
      options.invariant_form = GemmBf16Options::InvariantForm::kBatched;
    } else if (std::strcmp(form, "single") == 0) {
      options.invariant_form = GemmBf16Options::InvariantForm::kSingle;
    } else {
      spdlog::warn("HEARTH_INVARIANT_GEMM={} is not unsplit, batched or single; keeping unsplit",
                   form);
    }
  }
  if (const char* rows = std::getenv("HEARTH_INVARIANT_PLAN_ROWS");
      rows != nullptr && *rows != '\0') {
    const int value = std::atoi(rows);
    if (value >= kInvariantRows && value <= 4096 && value % kInvariantRows == 0) {
      options.invariant_plan_rows = value;
    } else {
      spdlog::warn(
          "HEARTH_INVARIANT_PLAN_ROWS={} is not a multiple of {} in [{}, 4096]; keeping {}", rows,
          kInvariantRows, kInvariantRows, options.invariant_plan_rows);
    }
  }
  const char* wgmma = std::getenv("HEARTH_WGMMA_GEMM");
  if (wgmma == nullptr || *wgmma == '\0') return options;
  if (std::strcmp(wgmma, "0") == 0) {
    options.wgmma = false;
  } else if (std::strcmp(wgmma, "1") == 0) {
    options.wgmma = true;
  } else {
    spdlog::warn("HEARTH_WGMMA_GEMM={} is not 0 or 1; keeping cuBLASLt's route", wgmma);
  }
  return options;
}

bool wgmma_gemm_routed(int m) { return m >= kWgmmaMinRoutedRows && m <= kWgmmaMaxRows; }

GemmBf16::GemmBf16(DeviceContext& ctx, GemmBf16Options options) : ctx_(&ctx), options_(options) {
  if (options_.wgmma && ctx.properties().major == 9) {
    wgmma_counters_ = zeroed_counters(ctx, kWgmmaCounters, "wgmma GEMM counters");
  }
}

GemmBf16::~GemmBf16() {
  for (auto& [key, b] : batched_) destroy_layouts(b.a, b.b, b.c);
  for (auto& [key, plan] : plans_) {
    destroy_layouts(plan.a, plan.b, plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
}

Result<GemmBf16::Plan*> GemmBf16::plan_for(const GemmShape& s) {
  const Key key = key_of(s);
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;

  Plan plan;
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
  HEARTH_RETURN_IF_ERROR(create_layouts(s, 1, &plan.a, &plan.b, &plan.c));

  cublasLtMatmulPreference_t pref = nullptr;
  HEARTH_RETURN_IF_ERROR(cublas_status(cublasLtMatmulPreferenceCreate(&pref), "GEMM preference"));
  size_t workspace = ctx_->workspace_size();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  cublasLtMatmulHeuristicResult_t heuristic[kMaxCandidates]{};
  int found = 0;
  cublasStatus_t err =
      cublasLtMatmulAlgoGetHeuristic(ctx_->cublaslt(), plan.desc, plan.a, plan.b, plan.c, plan.c,
                                     pref, kMaxCandidates, heuristic, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (err != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy_layouts(plan.a, plan.b, plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
    return unsupported_error("cuBLASLt has no bf16 GEMM for m={} n={} k={} (ld {} {} {})", s.m, s.n,
                             s.k, s.ldx, s.ldw, s.ldy);
  }
  for (int i = 0; i < found; ++i) plan.algos[i] = heuristic[i].algo;
  plan.count = found;
  return &plans_.emplace(key, plan).first->second;
}

Status GemmBf16::run(const GemmShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.ldx < s.k || s.ldw < s.k || s.ldy < s.n) {
    return invalid_argument_error("bad GEMM shape m={} n={} k={} ldx={} ldw={} ldy={}", s.m, s.n,
                                  s.k, s.ldx, s.ldw, s.ldy);
  }
  if (options_.batch_invariant) return run_invariant(s, x, w, y);
  if (gemv_bf16_supported(s.m, s.n, s.k, x, s.ldx, w, s.ldw)) {
    return cuda_status(
        gemv_bf16(x, s.ldx, w, s.ldw, y, s.ldy, s.out == GemmOut::kF32, s.accumulate, s.m, s.n, s.k,
                  ctx_->properties().multiProcessorCount, ctx_->stream()),
        "bf16 GEMV");
  }
  if (wgmma_counters_.data() != nullptr && wgmma_gemm_routed(s.m)) {
    HEARTH_ASSIGN_OR_RETURN(const bool ran, run_wgmma(s, x, w, y));
    if (ran) return ok_status();
  }
  HEARTH_ASSIGN_OR_RETURN(const Plan* plan, plan_for(s));
  return matmul(*ctx_, plan->desc, plan->a, plan->b, plan->c, plan->algos[plan->chosen], x, w, y,
                s.accumulate, "bf16 GEMM");
}

Result<bool> GemmBf16::run_wgmma(const GemmShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                 void* y) {
  if (wgmma_counters_.data() == nullptr) return false;
  WgmmaGemmArgs a;
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
  a.pdl = true;  // the first stages' weight loads overlap the previous kernel's tail
  a.partials = static_cast<float*>(ctx_->workspace());
  a.counters = wgmma_counters_.as<unsigned>();
  const WgmmaGemmPlan plan = wgmma_gemm_plan(a);
  if (!wgmma_gemm_supported(a, ctx_->properties().major) || plan.counters > kWgmmaCounters ||
      plan.partial_floats * sizeof(float) > ctx_->workspace_size()) {
    return false;
  }
  HEARTH_RETURN_IF_ERROR(cuda_status(wgmma_gemm(a, ctx_->stream()), "wgmma bf16 GEMM"));
  return true;
}

int GemmBf16::operand_rows(int m) const {
  if (!options_.batch_invariant ||
      options_.invariant_form == GemmBf16Options::InvariantForm::kUnsplit) {
    return m;
  }
  return (m + kInvariantRows - 1) / kInvariantRows * kInvariantRows;
}

Status GemmBf16::run_invariant(const GemmShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w,
                               void* y) {
  if (options_.invariant_form == GemmBf16Options::InvariantForm::kUnsplit) {
    HEARTH_ASSIGN_OR_RETURN(const Plan* plan, unsplit_plan(s));
    return matmul(*ctx_, plan->desc, plan->a, plan->b, plan->c, plan->unsplit, x, w, y,
                  s.accumulate, "bf16 GEMM (batch-invariant, unsplit)");
  }
  // The algorithm: the chosen one of the plan for invariant_plan_rows rows, run on whole
  // blocks of kInvariantRows rows (its layouts from batched_for, whatever the plan's m).
  GemmShape planned = s;
  planned.m = options_.invariant_plan_rows;
  HEARTH_ASSIGN_OR_RETURN(const Plan* plan, plan_for(planned));
  const std::size_t y_size = s.out == GemmOut::kF32 ? sizeof(float) : sizeof(__nv_bfloat16);
  const int blocks = (s.m + kInvariantRows - 1) / kInvariantRows;
  auto call = [&](const Batched& b, const __nv_bfloat16* xr, void* yr, const char* what) {
    return matmul(*ctx_, plan->desc, b.a, b.b, b.c, plan->algos[plan->chosen], xr, w, yr,
                  s.accumulate, what);
  };
  GemmShape block = s;
  block.m = kInvariantRows;
  if (blocks > 1) {
    // kBatched: the blocks as a strided batch; kSingle: all their rows as one shape.
    const bool single = options_.invariant_form == GemmBf16Options::InvariantForm::kSingle;
    GemmShape shape = block;
    if (single) shape.m = blocks * kInvariantRows;
    HEARTH_ASSIGN_OR_RETURN(const Batched* b, batched_for(shape, *plan, single ? 1 : blocks));
    if (b->usable) {
      return call(*b, x, y,
                  single ? "bf16 GEMM (batch-invariant, one call)"
                         : "bf16 GEMM (batch-invariant, batched)");
    }
  }
  HEARTH_ASSIGN_OR_RETURN(const Batched* one, batched_for(block, *plan, 1));
  if (!one->usable) {
    return unsupported_error("cuBLASLt refuses the {}-row plan's algorithm on {} rows (n={} k={})",
                             options_.invariant_plan_rows, kInvariantRows, s.n, s.k);
  }
  for (int r = 0; r < s.m; r += kInvariantRows) {
    HEARTH_RETURN_IF_ERROR(
        call(*one, x + static_cast<int64_t>(r) * s.ldx,
             static_cast<char*>(y) + static_cast<std::size_t>(r) * s.ldy * y_size,
             "bf16 GEMM (batch-invariant)"));
  }
  return ok_status();
}

namespace {

// One configuration attribute of algo (every one read here is 32 bits wide or less); -1 when
// cuBLASLt does not report it.
int64_t config_attribute(const cublasLtMatmulAlgo_t& algo,
                         cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t value = 0;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return -1;
  }
  return value;
}

int64_t algo_id(const cublasLtMatmulAlgo_t& algo) {
  return config_attribute(algo, CUBLASLT_ALGO_CONFIG_ID);
}

// True when algo sums k in one piece as cuBLASLt configured it (split-K 1, no reduction).
bool runs_unsplit(const cublasLtMatmulAlgo_t& algo) {
  return config_attribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) == 1 &&
         config_attribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) ==
             CUBLASLT_REDUCTION_SCHEME_NONE;
}

// algo with k in one piece (split-K 1, no reduction); none where cuBLASLt refuses either
// setting (a copy that kept its split would not be invariant).
std::optional<cublasLtMatmulAlgo_t> unsplit_copy(const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulAlgo_t copy = algo;
  const int32_t one = 1;
  const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
  if (cublasLtMatmulAlgoConfigSetAttribute(&copy, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
                                           sizeof(one)) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigSetAttribute(&copy, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none,
                                           sizeof(none)) != CUBLAS_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return copy;
}

}  // namespace

Result<GemmBf16::Plan*> GemmBf16::unsplit_plan(const GemmShape& s) {
  HEARTH_ASSIGN_OR_RETURN(Plan * plan, plan_for(s));
  if (plan->unsplit_resolved) return plan;
  // The algorithm id every m of this weight shape keeps: the 64-row plan's (itself unresolved
  // when s is that plan).
  const cublasLtMatmulAlgo_t* reference = nullptr;
  if (s.m != kInvariantRows) {
    GemmShape block = s;
    block.m = kInvariantRows;
    HEARTH_ASSIGN_OR_RETURN(const Plan* block_plan, unsplit_plan(block));
    reference = &block_plan->unsplit;
  }
  const int64_t wanted = reference != nullptr ? algo_id(*reference) : -1;
  // Takes algo as this plan's unsplit algorithm.
  auto take = [&](const cublasLtMatmulAlgo_t& algo) {
    plan->unsplit = algo;
    plan->unsplit_resolved = true;
  };
  auto accepted = [&](const cublasLtMatmulAlgo_t& algo) {
    cublasLtMatmulHeuristicResult_t check{};
    return cublasLtMatmulAlgoCheck(ctx_->cublaslt(), plan->desc, plan->a, plan->b, plan->c, plan->c,
                                   &algo, &check) == CUBLAS_STATUS_SUCCESS &&
           check.workspaceSize <= ctx_->workspace_size();
  };
  // From 64 rows, first choice: a candidate cuBLASLt itself runs unsplit, from the plans of m,
  // 2m and 4m rows in its order. For the 8B's down projection there is none among the 64-row
  // plan's candidates, whose first, forced to split-K 1 (below), took 44 us at 64 rows against
  // 39 for the 128-row plan's unsplit one (off, split-K: 35), and at 256 rows 69 forced against
  // 47 (off: 49) (lab_invariant_gemm, S23-A7 / S24-S7). Below 64 rows the forced pick is the
  // faster one (the o projection at one row: 12 us forced, 25 for its plan's unsplit tile).
  for (int times = 1; s.m >= kInvariantRows && times <= 4 && !plan->unsplit_resolved; times *= 2) {
    GemmShape larger = s;
    larger.m = s.m * times;
    HEARTH_ASSIGN_OR_RETURN(const Plan* source, plan_for(larger));
    for (int i = 0; i < source->count && !plan->unsplit_resolved; ++i) {
      const cublasLtMatmulAlgo_t& algo = source->algos[i];
      if ((wanted < 0 || algo_id(algo) == wanted) && runs_unsplit(algo) && accepted(algo)) {
        take(algo);
      }
    }
  }
  // Else the default candidates for this m in cuBLASLt's order, forced to split-K 1. (Its
  // ranking of the algorithms that need no reduction, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
  // put a kernel of another family (id 41) first for the 8B's down projection at 64 rows: 330
  // us against 44.)
  for (int i = 0; i < plan->count && !plan->unsplit_resolved; ++i) {
    if (wanted >= 0 && algo_id(plan->algos[i]) != wanted) continue;
    const std::optional<cublasLtMatmulAlgo_t> candidate = unsplit_copy(plan->algos[i]);
    if (candidate && accepted(*candidate)) take(*candidate);
  }
  if (!plan->unsplit_resolved && reference != nullptr && accepted(*reference)) take(*reference);
  if (!plan->unsplit_resolved) {
    return unsupported_error(
        "cuBLASLt has no unsplit bf16 GEMM algorithm for m={} n={} k={} (batch-invariant); "
        "HEARTH_INVARIANT_GEMM=batched runs the 64-row plan's algorithm in blocks",
        s.m, s.n, s.k);
  }
  return plan;
}

Result<const GemmBf16::Batched*> GemmBf16::batched_for(const GemmShape& s, const Plan& plan,
                                                       int blocks) {
  const auto key = std::make_pair(key_of(s), blocks);
  auto it = batched_.find(key);
  if (it != batched_.end()) return &it->second;
  Batched b;
  if (Status made = create_layouts(s, blocks, &b.a, &b.b, &b.c); !made.ok()) {
    destroy_layouts(b.a, b.b, b.c);
    return made;
  }
  // An algorithm cuBLASLt does not accept on the batch keeps the caller on single blocks.
  cublasLtMatmulHeuristicResult_t check{};
  b.usable = cublasLtMatmulAlgoCheck(ctx_->cublaslt(), plan.desc, b.a, b.b, b.c, b.c,
                                     &plan.algos[plan.chosen], &check) == CUBLAS_STATUS_SUCCESS &&
             check.workspaceSize <= ctx_->workspace_size();
  return &batched_.emplace(key, b).first->second;
}

Result<int> GemmBf16::candidates(const GemmShape& shape) {
  HEARTH_ASSIGN_OR_RETURN(const Plan* plan, plan_for(shape));
  return plan->count;
}

Status GemmBf16::choose(const GemmShape& shape, int candidate) {
  HEARTH_ASSIGN_OR_RETURN(Plan * plan, plan_for(shape));
  if (candidate < 0 || candidate >= plan->count) {
    return invalid_argument_error("GEMM candidate {} of {}", candidate, plan->count);
  }
  plan->chosen = candidate;
  // Layouts checked against the previous choice are checked again on their next use.
  for (auto it = batched_.begin(); it != batched_.end();) {
    destroy_layouts(it->second.a, it->second.b, it->second.c);
    it = batched_.erase(it);
  }
  return ok_status();
}

Result<std::string> GemmBf16::describe(const GemmShape& shape) {
  const bool unsplit = options_.batch_invariant &&
                       options_.invariant_form == GemmBf16Options::InvariantForm::kUnsplit;
  HEARTH_ASSIGN_OR_RETURN(const Plan* plan, unsplit ? unsplit_plan(shape) : plan_for(shape));
  const cublasLtMatmulAlgo_t& algo = unsplit ? plan->unsplit : plan->algos[plan->chosen];
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    return config_attribute(algo, attr);
  };
  return fmt::format("id={} tile={} stages={} splitk={} reduction={} cluster={}",
                     get(CUBLASLT_ALGO_CONFIG_ID), get(CUBLASLT_ALGO_CONFIG_TILE_ID),
                     get(CUBLASLT_ALGO_CONFIG_STAGES_ID), get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                     get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

}  // namespace hearth::cuda
