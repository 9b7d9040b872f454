// Adds a per-feature bias to a projection's output (Qwen2's q/k/v biases, llama's optional
// attention / MLP biases): y[r, i] += bias[i], in f32 with one rounding to bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

// y: [rows, cols] (row stride ld), bias: [cols].
cudaError_t bias_add(__nv_bfloat16* y, int64_t ld, const __nv_bfloat16* bias, int rows, int cols,
                     cudaStream_t stream);

}  // namespace hearth::cuda
