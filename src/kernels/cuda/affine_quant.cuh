// MLX-affine quantized weights (4 or 8 bits, groups of 32/64/128 along k):
// w[n, i] = scale[n, i / g] * q[n, i] + bias[n, i / g], q packed low bits first into
// uint32 words. A GEMV for decode (m <= 8 rows) that dequantizes in registers, and a
// dequantize-to-bf16 pass that prefill uses ahead of the cuBLASLt GEMM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

struct AffineQuantWeight {
  const uint32_t* packed = nullptr;  // [n, k * bits / 32]
  const void* scales = nullptr;      // [n, k / group_size], bf16 or f16
  const void* biases = nullptr;      // [n, k / group_size], same type as scales
  bool f16_scales = false;           // false: bf16
  int n = 0;
  int k = 0;
  int bits = 4;         // 4 or 8
  int group_size = 64;  // 32, 64 or 128; divides k
};

constexpr int kAffineGemvMaxRows = 8;

// y[m, n] = x[m, k] · wᵀ with m <= kAffineGemvMaxRows; x rows 16-byte aligned (ldx % 8 == 0).
// y is bf16, or f32 when y_f32 (logits for the sampler). sm_count sizes the grid (the
// device's multiprocessor count).
cudaError_t affine_gemv(const AffineQuantWeight& w, const __nv_bfloat16* x, int64_t ldx, int m,
                        void* y, int64_t ldy, bool y_f32, int sm_count, cudaStream_t stream);

// out[t, :] = dequantized row ids[t] of w (an MLX-quantized embedding table [vocab = n,
// hidden = k]) times scale, rounded to bf16; ids outside [0, n) give zero rows.
cudaError_t affine_embedding_gather(const AffineQuantWeight& w, const int32_t* ids, int tokens,
                                    float scale, __nv_bfloat16* out, int64_t ld_out,
                                    cudaStream_t stream);

// out[n, k] (row stride ld_out) = the dequantized weight, rounded to bf16.
cudaError_t affine_dequantize(const AffineQuantWeight& w, __nv_bfloat16* out, int64_t ld_out,
                              cudaStream_t stream);

}  // namespace hearth::cuda
