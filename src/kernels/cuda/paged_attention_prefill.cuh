// The tensor-core path of paged_attention for sequences with many new query tokens
// (prefill chunks): flash-attention style tiles of 64 queries x 64 keys, mma.sync bf16 with
// f32 accumulation, online softmax in registers. paged_attention() routes sequences here
// and decode rows to the split-K kernel; this header is internal to that op.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/paged_attention.cuh"

namespace hearth::cuda::detail {

// Sequences with at least this many new tokens take the tiled path (when head_dim has it).
constexpr int kTiledMinQueries = 16;

bool paged_attention_tiled_supported(int head_dim);

// Runs the tiled kernel for every sequence with q_len >= kTiledMinQueries; other tokens
// are left to the split-K kernel.
cudaError_t paged_attention_tiled(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda::detail
