// The fast CPU versions of the ops in kernels/ref/ops.h: same signatures plus the context
// whose thread pool they split work over. Tested against ref on sizes that break vector
// tails (tests/kernels).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/thread_pool.h"
#include "kernels/weight.h"

namespace hearth::kernels::cpu {

// Tuning: batches of at most this many rows use the mat-vec kernel (weights streamed
// once, all rows against each weight row); larger ones run, in AVX-512 builds, hearth's
// cache-blocked GEMM (float weights, and quantized ones dequantized as its weight slices are
// packed; CpuContext::hearth_prefill_gemm); otherwise (no AVX-512, or
// HEARTH_CPU_PREFILL_GEMM=blas) they dequantize weight tiles to f32 and run OpenBLAS sgemm.
inline constexpr int64_t kMatVecMaxRows = 4;

// What linear() uses for batches over kMatVecMaxRows rows on this machine.
std::string prefill_gemm_name(const CpuContext& ctx);

// y[m, w.rows] = x[m, w.cols] · wᵀ
void linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y);

void embedding(CpuContext& ctx, const WeightMatrix& w, const int32_t* tokens, int64_t n,
               float* out);

void rms_norm(CpuContext& ctx, const float* x, const float* weight, int64_t rows, int64_t dim,
              float eps, float* out);

void rope(CpuContext& ctx, float* x, const int32_t* positions, int64_t tokens, int heads,
          int head_dim, const float* inv_freq, float attention_factor);

void silu_mul(CpuContext& ctx, const float* gate, const float* up, int64_t rows, int64_t dim,
              float* out);

void paged_attention(CpuContext& ctx, const PagedAttentionArgs& args);

// x[i] += y[i] for i < n (the residual adds), over the pool for large n.
void add_inplace(CpuContext& ctx, float* x, const float* y, int64_t n);

// Dequantizes / converts rows [r0, r1) of w to f32: out [(r1 - r0), w.cols]. A quantized w
// whose row-major codes were released reads its rows16 copy (the same values, the same bits).
void weight_rows_f32(const WeightMatrix& w, int64_t r0, int64_t r1, float* out);

}  // namespace hearth::kernels::cpu
