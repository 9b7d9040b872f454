// The tensor-core form of the affine decode GEMV (AffineGemvKernel::kTensorCore), called by
// affine_gemv() in affine_quant.cu; see affine_gemv_mma.cu for the design.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/affine_quant.cuh"

namespace hearth::cuda::detail {

// 4 bits, groups of 64 or 128, k % 256 == 0, scales / biases 8-byte aligned, packed rows
// 8-byte aligned, one staged x row within the shared-memory cap. The caller has checked
// the common contract (affine_gemv_supported's other conditions).
bool affine_gemv_mma_supported(const AffineGemvArgs& a);
cudaError_t affine_gemv_mma(const AffineGemvArgs& a, cudaStream_t stream);

}  // namespace hearth::cuda::detail
