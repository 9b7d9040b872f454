// Embedding gather: one block per token, a coalesced copy of one table row.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.cuh"

namespace hearth::cuda {
namespace {

// kBatch elements a thread are loaded before its first store (a store may alias a later
// load: a load-store loop waited one round trip an element, 16 in series for a 4096 row).
__global__ void embedding_gather_kernel(const __nv_bfloat16* table, int64_t ld_table,
                                        const int32_t* ids, int hidden, int vocab, float scale,
                                        __nv_bfloat16* out, int64_t ld_out) {
  constexpr int kBatch = 16;
  int t = blockIdx.x;
  int id = ids[t];
  __nv_bfloat16* dst = out + t * ld_out;
  if (id < 0 || id >= vocab) {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = __float2bfloat16(0.0f);
    return;
  }
  const __nv_bfloat16* src = table + id * ld_table;
  for (int base = 0; base < hidden; base += kBatch * blockDim.x) {
    __nv_bfloat16 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x + threadIdx.x;
      if (i < hidden) v[u] = src[i];
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x + threadIdx.x;
      if (i >= hidden) continue;
      dst[i] = scale == 1.0f ? v[u] : __float2bfloat16(__bfloat162float(v[u]) * scale);
    }
  }
}

}  // namespace

cudaError_t embedding_gather(const __nv_bfloat16* table, int64_t ld_table, const int32_t* ids,
                             int tokens, int hidden, int vocab, float scale, __nv_bfloat16* out,
                             int64_t ld_out, cudaStream_t stream) {
  if (tokens < 0 || hidden <= 0 || vocab <= 0 || ld_table < hidden || ld_out < hidden) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0) return cudaSuccess;
  embedding_gather_kernel<<<tokens, 256, 0, stream>>>(table, ld_table, ids, hidden, vocab, scale,
                                                      out, ld_out);
  return cudaGetLastError();
}

}  // namespace hearth::cuda
