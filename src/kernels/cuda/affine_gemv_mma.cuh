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

// How the kernel's weights reach the registers (lab A/B; affine_gemv_mma above uses
// kMmaDefault): one chunk ahead of the math; or, kMmaRegistersEarly, the second chunk also
// loaded before the PDL wait (for a GEMV whose predecessor leaves most multiprocessors free,
// as batch-1 attention does for o: both chunks of a k = 4096 tile's warp share stream while it
// runs; prepared in session 15, not yet measured). The designs that lost (a cp.async ring, 2
// chunks ahead, 3 blocks a multiprocessor, bulk-copy stages) are in dev/cuda/NOTES.md and git.
enum MmaDesign { kMmaRegisters = 1, kMmaRegistersEarly = 4 };
constexpr MmaDesign kMmaDefault = kMmaRegisters;
cudaError_t affine_gemv_mma(const AffineGemvArgs& a, cudaStream_t stream, MmaDesign design);
// Resident blocks per multiprocessor of the kernel these args launch (0 on error).
int affine_gemv_mma_blocks_per_sm(const AffineGemvArgs& a, MmaDesign design);

}  // namespace hearth::cuda::detail
