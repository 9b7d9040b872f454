// One pass over a fused QKV projection: split it into heads, optionally RMS-normalize each
// q/k head (Qwen3, Gemma3), rotate q and k with RoPE (rotate-half convention, as
// transformers), write the rotated q out and k, v into their paged-cache slots.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

struct RopeKvWriteArgs {
  const __nv_bfloat16* qkv = nullptr;  // [tokens, (q_heads + 2 * kv_heads) * head_dim]: q|k|v
  int64_t ld_qkv = 0;
  const int32_t* positions = nullptr;     // [tokens]
  const int64_t* slots = nullptr;         // [tokens] block_id * block_size + offset; < 0: no write
  const float* inv_freq = nullptr;        // [rotary_dim / 2], from rope_frequencies()
  float attention_scaling = 1.0f;         // multiplies cos and sin
  const __nv_bfloat16* q_norm = nullptr;  // [head_dim] or null: per-head RMSNorm of q
  const __nv_bfloat16* k_norm = nullptr;  // [head_dim] or null
  float norm_eps = 1e-6f;
  float norm_weight_offset = 0.0f;
  __nv_bfloat16* q_out = nullptr;  // [tokens, q_heads * head_dim]
  int64_t ld_q_out = 0;
  __nv_bfloat16* k_cache = nullptr;  // [slots, kv_heads, head_dim]
  __nv_bfloat16* v_cache = nullptr;  // [slots, kv_heads, head_dim]
  int tokens = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;  // even, <= head_dim; the rest of each head passes through
  // rope_kv_write only (sm_90+): launch as a programmatic dependent of the previous kernel
  // (scheduled as its blocks exit; waits for its writes before reading qkv).
  bool pdl = false;
};

cudaError_t rope_kv_write(const RopeKvWriteArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda
