// Embedding gather: out[t, :] = scale * table[ids[t], :] (bf16). An id outside [0, vocab)
// writes a zero row; callers validate ids on the host and report bad input there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

// table: [vocab, hidden] (row stride ld_table), ids: [tokens], out: [tokens, hidden]
// (row stride ld_out). scale multiplies in f32 before the one rounding to bf16 (Gemma
// passes sqrt(hidden) rounded to bf16, as transformers does; others pass 1).
cudaError_t embedding_gather(const __nv_bfloat16* table, int64_t ld_table, const int32_t* ids,
                             int tokens, int hidden, int vocab, float scale, __nv_bfloat16* out,
                             int64_t ld_out, cudaStream_t stream);

}  // namespace hearth::cuda
