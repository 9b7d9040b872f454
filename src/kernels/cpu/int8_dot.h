// Quantized linear layers through integer dot products: each activation row is quantized per
// weight group to int8 (one f32 scale per group, the exact f32 group sum kept for the bias
// term) and multiplied with the 4/8-bit MLX codes by AVX512-VNNI `vpdpbusd`. Opt-in
// (CpuContext::int8_dot): rounding the activations changes outputs slightly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/weight.h"

namespace hearth::kernels::cpu {

// True when this build has the int8 kernels (AVX512-VNNI + VBMI at compile time) and the
// CPU it runs on has those instructions.
bool int8_dot_available();

// True when int8_linear handles w: quantized, 4 or 8 bits, group size 32 or a multiple of
// 64, and int8_dot_available().
bool int8_dot_supported(const WeightMatrix& w);

// The batch-invariant decode's layout for a 4- or 8-bit matrix (WeightMatrix::rows16*): the
// codes interleaved by 16 rows, one 64-byte vector holding a 32-bit word (four 8-bit or eight
// 4-bit columns) of each of 16 rows, and the
// scales and biases [ceil(rows / 16), groups, 16] in w.scale_dtype (rows past the end zero).
// With it, int8_linear's decode (1-4 rows) runs the prefill GEMM's per-output sequence with
// weight rows in lanes, so a row's result is the same bits at every batch size; without it
// the decode kernels sum in their own order. The GEMM (5+ rows) reads it too (the same bits as
// from w.data), so once it is built int8_linear never reads w.data, w.scales or w.biases: the
// caller may release them.
bool rows16_wanted(const WeightMatrix& w);  // int8_dot_supported(w)
struct Rows16Bytes {
  std::size_t codes = 0;
  std::size_t side = 0;  // scales, and again biases
};
Rows16Bytes rows16_bytes(const WeightMatrix& w);
// Fills the whole layout (codes, scales and biases sized by rows16_bytes). The _blocks form
// fills only 16-row blocks [block0, block1) of it: a loader can release the source rows it
// has read before it reads the next (no second copy of a whole matrix at any time).
void interleave_rows16(const WeightMatrix& w, uint8_t* codes, void* scales, void* biases);
void interleave_rows16_blocks(const WeightMatrix& w, int64_t block0, int64_t block1, uint8_t* codes,
                              void* scales, void* biases);

// y[m, w.rows] = x[m, w.cols] · wᵀ with x quantized to int8 per group of w.group_size:
// for each group, y += s·d·Σ(q·xq) + b·Σx (s, b: the weight group's scale and bias; d: the
// activation group's scale). False (y untouched) when !int8_dot_supported(w).
bool int8_linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y);

}  // namespace hearth::kernels::cpu
