// Dense prefill GEMM for float / bf16 / f16 weights on AVX-512 (f32 products and sums; the
// weights are converted exactly to f32). Blocked for the cache like a BLIS GEMM: the
// activations are packed once per call into k-major micro-panels of kGemmMr rows (shared by
// all threads); each thread converts its weight rows one kc-deep slice at a time into
// k-major panels of 32 rows (L2-resident) and runs a 14 x 32 register tile (28 accumulators,
// one weight vector pair and 14 broadcast activations per k) whose weight panel stays in L1.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/weight.h"

namespace hearth::kernels::cpu {

// Activation rows per register tile.
inline constexpr int64_t kGemmMr = 14;

// True when dense_gemm handles w: a float / bf16 / f16 matrix in an AVX-512 build.
bool dense_gemm_supported(const WeightMatrix& w);

// y[m, w.rows] = x[m, w.cols] · wᵀ. False (y untouched) when !dense_gemm_supported(w).
bool dense_gemm(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y);

}  // namespace hearth::kernels::cpu
