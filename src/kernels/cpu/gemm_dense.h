// Dense prefill GEMM for float / bf16 / f16 weights on AVX-512 (f32 products and sums; the
// weights are converted exactly to f32). Blocked for the cache like a BLIS GEMM: the
// activations are packed once per call into k-major micro-panels of kGemmMr rows (shared by
// all threads); each thread converts its weight rows one kc-deep slice at a time into
// k-major panels of 32 rows (L2-resident) and runs a 14 x 32 register tile (28 accumulators,
// one weight vector pair and 14 broadcast activations per k) whose weight panel stays in L1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/weight.h"

namespace hearth::kernels::cpu {

// Activation rows per register tile.
inline constexpr int64_t kGemmMr = 14;

// True when dense_gemm handles w: a float / bf16 / f16 matrix in an AVX-512 build.
bool dense_gemm_supported(const WeightMatrix& w);

// True when dense_gemm also takes w as a quantized matrix (4/8-bit MLX affine, group size a
// multiple of 16, row-major codes present) in an AVX-512 build: its weight slices are
// dequantized (s * q + b, f32) as they are packed, so a quantized prefill runs the float GEMM's
// register tile.
bool dense_gemm_quantized_supported(const WeightMatrix& w);

// y[m, w.rows] = x[m, w.cols] · wᵀ. False (y untouched) when neither dense_gemm_supported(w)
// nor dense_gemm_quantized_supported(w).
bool dense_gemm(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y);

// Activation rows dense_gemm_rows takes.
inline constexpr int64_t kDenseRowsMax = 15;

// dense_gemm's result, bit for bit, for 1..kDenseRowsMax activation rows without its weight
// packing (each output is summed in 256-column slices, each slice from zero by one fused
// multiply-add a column in column order, then added to the running total in slice order: the
// same operations in the same order as dense_gemm, whatever m). The batch-invariant route for
// float weights: decode and short prefills here, 16+ rows through dense_gemm. False (y
// untouched) when !dense_gemm_supported(w) or m > kDenseRowsMax.
bool dense_gemm_rows(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y);

// The 16-row-interleaved copy of a float matrix (WeightMatrix::panels16) that the
// batch-invariant route reads: dense_gemm packs its panels from it with no transpose, and
// dense_gemm_rows streams it one 16-row group at a time (a decode step reads each weight once,
// contiguously). Same bits as from the row-major matrix. Wanted for float / bf16 / f16 weights
// in an AVX-512 build.
bool panels16_wanted(const WeightMatrix& w);
std::size_t panels16_bytes(const WeightMatrix& w);
// Groups [g0, g1) of 16 rows into dst (panels16_bytes(w) bytes for the whole matrix).
void interleave_panels16_blocks(const WeightMatrix& w, int64_t g0, int64_t g1, void* dst);

}  // namespace hearth::kernels::cpu
