// Kernel-lab helper: fills device memory with seeded pseudo-random values (never zeros:
// zeros hide unwritten outputs and run faster than real data).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hearth::cuda::dev {

// Uniform in [-scale, scale), rounded to bf16.
cudaError_t fill_random_bf16(__nv_bfloat16* data, size_t n, uint64_t seed, float scale,
                             cudaStream_t stream);
// Uniformly random 32-bit words (packed quantized weights).
cudaError_t fill_random_u32(uint32_t* data, size_t n, uint64_t seed, cudaStream_t stream);

}  // namespace hearth::cuda::dev
