// Paged attention over a flattened varlen batch (no prefill/decode phases): each sequence
// has q_len new query tokens at the end of kv_len cached keys; query i sits at position
// kv_len - q_len + i and sees keys [max(0, pos - window + 1), pos]. GQA, sliding window,
// score soft-capping; long key ranges are split across blocks (split-K) and merged. Each
// K/V row is read once per (token, KV head), whatever the GQA ratio.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hearth::cuda {

struct PagedAttentionArgs {
  const __nv_bfloat16* q = nullptr;  // [tokens, q_heads * head_dim], rotated
  int64_t ld_q = 0;
  const __nv_bfloat16* k_cache = nullptr;  // [slots, kv_heads, head_dim]
  const __nv_bfloat16* v_cache = nullptr;  // [slots, kv_heads, head_dim]
  const int32_t* block_tables = nullptr;   // [seqs, ld_block_tables] block ids
  int64_t ld_block_tables = 0;
  const int32_t* query_start = nullptr;  // [seqs + 1] first token ([seqs] = tokens); >= 1 each
  const int32_t* kv_lens = nullptr;      // [seqs] keys in cache incl. this step's tokens
  __nv_bfloat16* out = nullptr;          // [tokens, q_heads * head_dim]
  int64_t ld_out = 0;
  int seqs = 0;
  int tokens = 0;
  int q_heads = 0;
  int kv_heads = 0;  // divides q_heads
  int head_dim = 0;  // 16, 32, 64, 96, 128, 160, 192 or 256
  int block_size = 0;
  float scale = 1.0f;          // usually 1/sqrt(head_dim)
  float softcap = 0.0f;        // 0: off; else scores = softcap * tanh(scores / softcap)
  int sliding_window = 0;      // 0: off
  int num_splits = 1;          // 1..256, from paged_attention_num_splits(); > 1 needs the workspace
  float* workspace = nullptr;  // paged_attention_workspace_bytes() bytes when num_splits > 1
  // Programmatic dependent launch (sm_90+ only; the caller checks), used when num_splits is
  // 1: the decode kernel looks up its sequence (step metadata, which no kernel writes) before
  // it waits for the previous kernel, and lets the next PDL-launched kernel start at once
  // (the decode step's o GEMV streams its first weights during the attention).
  bool pdl = false;
  // Warps a decode block: 0 picks (8 when the grid fills under half the SMs and 32 <= head_dim
  // <= 128, else 4); 4 or 8 force it (lab A/B; 8 falls back to 4 outside that head_dim range).
  // 8-warp blocks also pull their K/V rows into L2 before the wait on the previous kernel.
  int block_warps = 0;
  // > 0: split s of a query covers its visible keys [lo + s * split_keys, lo + (s + 1) *
  // split_keys) (a multiple of 16), whatever num_splits is; num_splits * split_keys must cover
  // the longest query's keys. 0: the keys are split evenly num_splits ways.
  int split_keys = 0;
  // Batch-invariant (--batch-invariant): every query runs the tiled tensor-core kernel
  // (paged_attention_prefill.cuh), a decode row in a tile of its own, over its keys in one
  // pass, or, with split_keys, in splits of that many absolute keys merged in order (num_splits
  // > 1 needs split_keys: see paged_attention_invariant_splits); a row's sums do not depend
  // on the rows beside it in a tile. So its bits are the same whatever else the step holds
  // and however its prompt was chunked. Head sizes the tiled kernel does not take (96, 160,
  // 192, 256) run the 4-warp decode kernel instead (no 8-warp blocks), in its own order.
  bool batch_invariant = false;
};

// A split count that fills the device: 1 when the (token, KV head) grid already does. A pure
// function of the shapes (decode steps captured in CUDA graphs key on it).
int paged_attention_num_splits(int tokens, int q_heads, int kv_heads, int max_kv_len, int sm_count);
// For callers without the KV head count: assumes no GQA (fewer splits than the above for
// GQA models; still correct).
int paged_attention_num_splits(int tokens, int q_heads, int max_kv_len, int sm_count);

// The batch-invariant split: keys in splits of kInvariantSplitKeys. On the tiled kernel
// (head sizes 16-128) split z holds the absolute keys [z * split_keys, (z + 1) * split_keys),
// so a decode row and the same position inside a prompt's tile walk the same 64-key tiles; on
// the decode kernel (other head sizes) splits start at each query's first key. A query whose
// keys fit one split is written by the split's own block (the combine kernel skips it), one
// of more splits is merged by the combine kernel over its splits in order, so a query's bits
// depend on its own keys only; a step whose queries all fit one split runs one pass
// (num_splits 1). Returns num_splits and sets *split_keys for a step whose longest query
// sees max_kv_len keys; past 256 splits (131,072 keys) the split grows with max_kv_len, so
// queries that long are invariant only among steps of the same longest length.
constexpr int kInvariantSplitKeys = 512;
int paged_attention_invariant_splits(int max_kv_len, int* split_keys);

// Workspace for num_splits (and for the tiled prefill path's own key splits, which use the
// same buffer earlier in the stream). 0: pass no workspace.
size_t paged_attention_workspace_bytes(int tokens, int q_heads, int head_dim, int num_splits);

cudaError_t paged_attention(const PagedAttentionArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda
