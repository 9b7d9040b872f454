// bf16 GEMV for decode (m <= 4 rows): y[m, n] = x[m, k] · w[n, k]^T (+ y), f32 accumulate.
// cuBLASLt reaches only 40-50% of the copy bandwidth on 4096x4096 at m = 1 (dev/cuda/
// NOTES.md); this kernel keeps x in shared memory and streams w with 16-byte loads, four in
// flight per lane. GemmBf16::run routes small-m shapes here. gemv_bf16(GemvArgs) adds the
// decode step's fusions: an RMSNorm prologue, residual-add / gated-activation / bias
// epilogues, split rows and programmatic dependent launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/rope_kv_write.cuh"

namespace hearth::cuda {

constexpr int kGemvMaxRows = 4;  // rows the kernels take

// Rows up to which the GEMV beats cuBLASLt, so GemmBf16 (and the CUDA model's fused decode
// path) route only these here. H200, 8B layer shapes (lab_engine_gpu, W1): the GEMV took
// 122 us a layer at m = 1 but 247 at m = 4 (issue-bound: every row re-unpacks x), cuBLASLt
// 128 at m = 8; m = 2 is estimated at the crossover (lab_decode_step measures m = 1..4).
constexpr int kGemvRoutedMaxRows = 2;

// True when GemmBf16 should route the shape to gemv_bf16: m <= kGemvRoutedMaxRows, x fits
// in shared memory, k, ldx, ldw multiples of 8 and x, w 16-byte aligned. (gemv_bf16 itself
// takes up to kGemvMaxRows rows.)
bool gemv_bf16_supported(int m, int n, int k, const void* x, int64_t ldx, const void* w,
                         int64_t ldw);

// y is bf16, or f32 when y_f32; accumulate adds to y instead of overwriting it.
cudaError_t gemv_bf16(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                      void* y, int64_t ldy, bool y_f32, bool accumulate, int m, int n, int k,
                      int sm_count, cudaStream_t stream);

// What happens to v = x · w[row] (f32) on the way out.
enum class GemvEpilogue {
  kStore,        // y = v (rounded to bf16, or f32)
  kAccumulate,   // y = y + v, one rounding
  kResidualAdd,  // y = bf16(y + bf16(v)): the residual add, rounded as the unfused
                 // gemv + rmsnorm_residual pair rounds it (bf16 y only)
  kGatedSilu,    // y[j] = bf16(silu(bf16(v_j)) * bf16(v_{j+n})): w has 2n rows, gate then
                 // up, rounded as the unfused gemv + gated_activation pair (bf16 y only)
  kGatedGeluTanh,
  kRopeKvWrite,  // w is a fused q|k|v projection of n = (q_heads + 2 kv_heads) * head_dim
                 // rows; a warp computes rows i and i + head_dim / 2 of one head and stores
                 // what rope_kv_write makes of bf16(v) (+ bias): rotated q into rope.q_out,
                 // rotated k and v into the cache slots. Bits as gemv + rope_kv_write; y is
                 // not written. Needs rotary_dim == head_dim and no q/k norm.
};

struct GemvArgs {
  const __nv_bfloat16* x = nullptr;  // [m, k] (ldx); the residual stream when norm_weight
  int64_t ldx = 0;
  const __nv_bfloat16* w = nullptr;  // [n, k] (ldw); [2n, k] for the gated epilogues
  int64_t ldw = 0;
  const __nv_bfloat16* bias = nullptr;  // [n] ([2n] gated) or null; added to bf16(v) and
                                        // rounded again, as bias_add after the GEMV does
  void* y = nullptr;                    // [m, n] (ldy), bf16 or f32
  int64_t ldy = 0;
  bool y_f32 = false;
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  // RMSNorm prologue: when set, the GEMV multiplies bf16(rmsnorm(x) * (norm_weight +
  // norm_offset)) with the bits rmsnorm_residual(nullptr, ...) would write.
  const __nv_bfloat16* norm_weight = nullptr;  // [k]
  float norm_offset = 0.0f;
  float norm_eps = 1e-5f;
  int m = 0;
  int n = 0;  // output columns
  int k = 0;
  int sm_count = 0;
  int split = 0;        // warps per output row: 1, 2 or 4 (2 and 4 change the summation order);
                        // 0 picks 1 while the rows fit one wave of warps, else 2
  bool pdl = false;     // programmatic dependent launch (sm_90+ only): weight loads start
                        // before the previous kernel finishes
  int grid = 0;         // blocks; 0 picks (at most 2 per SM)
  int l2_prefetch = 0;  // 1: each warp prefetches the rest of its first rows into L2 before
                        // the wait (lab)
  // After its own rows, the GEMV prefetches [prefetch, prefetch + prefetch_bytes) into L2:
  // the next GEMV's weights, when small kernels run in between.
  const void* prefetch = nullptr;
  size_t prefetch_bytes = 0;
  // Gated epilogues: 0, w holds all gate rows, then all up rows; b > 0, blocks of b gate rows
  // then the b matching up rows (b divides n; 1 alternates them). The bias stays [gate | up].
  // Same bits either way (lab A/B of the layout).
  int gate_up_block = 0;
  // kRopeKvWrite: positions, slots, inv_freq, attention_scaling, q_out, ld_q_out, k_cache,
  // v_cache, q_heads, kv_heads, head_dim and rotary_dim (one row of positions / slots per
  // row of x); qkv, ld_qkv, tokens and the q/k norms are not used.
  RopeKvWriteArgs rope;
};

// True when gemv_bf16(args) handles the arguments (the same shape rules as above, plus the
// epilogue's output type and split in {1, 2, 4}; for kRopeKvWrite, rope's shapes).
bool gemv_bf16_supported(const GemvArgs& args);
cudaError_t gemv_bf16(const GemvArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda
