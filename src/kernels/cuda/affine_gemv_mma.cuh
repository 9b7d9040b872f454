// The tensor-core form of the affine decode GEMV (AffineGemvKernel::kTensorCore), called by
// affine_gemv() in affine_quant.cu, and the tiled weight layout it reads fastest; see
// affine_gemv_mma.cu for the design.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/affine_quant.cuh"

namespace hearth::cuda::detail {

// 4 bits, groups of 64 or 128, k % 256 == 0, one staged x row within the shared-memory cap;
// row-major: scales / biases 8-byte aligned, packed rows 8-byte aligned; tiled: packed
// 16-byte aligned and an epilogue the layout serves (kTiledPlain: per-row stores;
// kTiledGated: the gate or per-row stores; kTiledRope: RoPE + KV write with the layout's
// head_dim, or per-row stores). The caller has checked the common contract
// (affine_gemv_supported's other conditions).
bool affine_gemv_mma_supported(const AffineGemvArgs& a);
cudaError_t affine_gemv_mma(const AffineGemvArgs& a, cudaStream_t stream);
// Resident blocks per multiprocessor of the kernel these args launch (0 on error).
int affine_gemv_mma_blocks_per_sm(const AffineGemvArgs& a);
// The layout half of affine_tile / affine_dequantize (affine_quant.cuh).
cudaError_t affine_dequantize_tiled(const AffineQuantWeight& w, __nv_bfloat16* out, int64_t ld_out,
                                    cudaStream_t stream);

}  // namespace hearth::cuda::detail
