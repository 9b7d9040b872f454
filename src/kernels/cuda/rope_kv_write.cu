// RoPE + QKV split + paged KV write: a block per token and group of 8 heads, a warp a head
// (a 64-token decode step runs 384 blocks, not 64 blocks of six heads a warp in turn).
// Angles are computed in f32 as position * inv_freq (as transformers does) with accurate
// sincosf (detail::rope_pair, shared with the qkv GEMV's fused form).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rope_kv_write.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarps = 8;

__global__ void rope_kv_write_kernel(RopeKvWriteArgs a) {
  // A PDL-launched paged attention may start its metadata prologue now (it waits for this
  // grid before reading q or the cache); without PDL this is a no-op.
  detail::launch_dependents();
  detail::grid_dependency_wait();  // a PDL launch: the qkv GEMM's output first
  int t = blockIdx.x;
  int lane = threadIdx.x & 31;
  int warp = threadIdx.x >> 5;
  int total_heads = a.q_heads + 2 * a.kv_heads;
  int half = a.rotary_dim / 2;
  float pos = static_cast<float>(a.positions[t]);
  int64_t slot = a.slots[t];
  const __nv_bfloat16* row = a.qkv + t * a.ld_qkv;

  const int h = blockIdx.y * kWarps + warp;
  if (h < total_heads) {
    const __nv_bfloat16* src = row + h * a.head_dim;
    bool is_q = h < a.q_heads;
    bool is_v = h >= a.q_heads + a.kv_heads;
    __nv_bfloat16* dst;
    if (is_q) {
      dst = a.q_out + t * a.ld_q_out + h * a.head_dim;
    } else {
      if (slot < 0) return;
      int kv_head = is_v ? h - a.q_heads - a.kv_heads : h - a.q_heads;
      __nv_bfloat16* cache = is_v ? a.v_cache : a.k_cache;
      dst = cache + (slot * a.kv_heads + kv_head) * a.head_dim;
    }
    if (is_v) {
      for (int i = lane; i < a.head_dim; i += 32) dst[i] = src[i];
      return;
    }
    const __nv_bfloat16* norm = is_q ? a.q_norm : a.k_norm;
    float inv_rms = 1.0f;
    if (norm != nullptr) {
      float sum_sq = 0.0f;
      for (int i = lane; i < a.head_dim; i += 32) {
        float v = __bfloat162float(src[i]);
        sum_sq += v * v;
      }
      sum_sq = detail::warp_sum(sum_sq);
      inv_rms = rsqrtf(sum_sq / static_cast<float>(a.head_dim) + a.norm_eps);
    }
    auto load = [&](int i) {
      float v = __bfloat162float(src[i]);
      if (norm != nullptr) v *= inv_rms * (__bfloat162float(norm[i]) + a.norm_weight_offset);
      return v;
    };
    for (int i = lane; i < half; i += 32) {
      detail::rope_pair(pos, a.inv_freq[i], a.attention_scaling, load(i), load(i + half), &dst[i],
                        &dst[i + half]);
    }
    for (int i = a.rotary_dim + lane; i < a.head_dim; i += 32) dst[i] = __float2bfloat16(load(i));
  }
}

}  // namespace

cudaError_t rope_kv_write(const RopeKvWriteArgs& a, cudaStream_t stream) {
  if (a.tokens < 0 || a.q_heads <= 0 || a.kv_heads <= 0 || a.head_dim <= 0 || a.rotary_dim < 0 ||
      a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim ||
      a.ld_qkv < static_cast<int64_t>(a.q_heads + 2 * a.kv_heads) * a.head_dim ||
      a.ld_q_out < static_cast<int64_t>(a.q_heads) * a.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (a.tokens == 0) return cudaSuccess;
  const int head_groups = (a.q_heads + 2 * a.kv_heads + kWarps - 1) / kWarps;
  if (head_groups > 65535) return cudaErrorInvalidValue;
  return detail::launch_kernel(rope_kv_write_kernel, dim3(a.tokens, head_groups), dim3(kWarps * 32),
                               0, stream, a.pdl, a);
}

}  // namespace hearth::cuda
