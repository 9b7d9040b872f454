// Dense bf16 prefill through AVX512-BF16 dot products: activations are rounded to bf16 once
// per GEMM and multiplied with the bf16 weights by `vdpbf16ps` (32 products per instruction
// into 16 f32 lanes). Opt-in (CpuContext::bf16_dot): rounding the activations changes outputs.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/weight.h"

namespace hearth::kernels::cpu {

// True when this build has the bf16 kernels (AVX512-BF16 at compile time) and the CPU it
// runs on has the instruction.
bool bf16_dot_available();

// Which kernel bf16_linear runs here: "avx512-bf16 vdpbf16ps panels" (or "none").
const char* bf16_dot_kernel_name();

// True when bf16_linear handles w: bf16 weights and bf16_dot_available().
bool bf16_dot_supported(const WeightMatrix& w);

// y[m, w.rows] = bf16(x)[m, w.cols] · wᵀ with each activation rounded to the nearest bf16
// (ties to even), products summed in f32. False (y untouched) when !bf16_dot_supported(w).
bool bf16_linear(CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t m, float* y);

}  // namespace hearth::kernels::cpu
