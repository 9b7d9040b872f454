// Final-logit soft-capping (Gemma 2/3): x = cap * tanh(x / cap), in place on f32 logits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

// logits: [rows, cols] f32 (row stride ld). cap > 0.
cudaError_t softcap(float* logits, int64_t ld, int rows, int cols, float cap, cudaStream_t stream);

}  // namespace hearth::cuda
