// The tensor-core path of paged_attention for sequences with many new query tokens
// (prefill chunks, prompt suffixes over a cached prefix): flash-attention style tiles of
// (token, q head) rows x 64 keys on mma.sync, online softmax in registers, and a key-range
// split with a combine pass when the grid alone would not fill the device. Under
// batch invariance it runs every query, decode rows included.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/paged_attention.cuh"

namespace hearth::cuda::detail {

// Sequences with at least this many new tokens take the tiled path (when head_dim has it).
constexpr int kTiledMinQueries = 16;

bool paged_attention_tiled_supported(int head_dim);

// Workspace bytes the tiled path can use to split the key range of small grids (0 when the
// grid is large); paged_attention_workspace_bytes() includes it. The tiled path uses no
// more than paged_attention_workspace_bytes(tokens, q_heads, head_dim, num_splits) of
// args.workspace (none when it is null), so a smaller workspace only means fewer splits.
size_t paged_attention_tiled_workspace_bytes(int tokens, int q_heads, int head_dim);

// Runs the tiled kernel for every sequence with q_len >= kTiledMinQueries; other tokens
// are left to the split-K kernel. With args.batch_invariant, for every sequence (decode rows
// too: a row's sums do not depend on the other rows of its tile, the tile's key range or
// the step), in args.num_splits splits of args.split_keys absolute keys (a multiple of 64;
// 0: one split), merged per row over its own splits; the workspace must then hold
// paged_attention_workspace_bytes(tokens, q_heads, head_dim, num_splits).
cudaError_t paged_attention_tiled(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda::detail
