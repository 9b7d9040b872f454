// Paged attention, one block per (query token, q head, split): four warps take 32 keys at a
// time (one key per lane for the q·k dot), keep an online softmax (base-2 exponent), and
// accumulate V with each lane owning head_dim/32 output dims. Warps merge in shared memory;
// splits merge in a second kernel. Correct for any mix of prefill and decode rows.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_attention_prefill.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarps = 4;

struct KeyRange {
  int seq;
  int q_len;  // the sequence's new tokens
  int lo;     // first visible key
  int hi;     // one past the last visible key
};

__device__ __forceinline__ KeyRange key_range(const PagedAttentionArgs& a, int t) {
  int lo_seq = 0;
  int hi_seq = a.seqs - 1;
  while (lo_seq < hi_seq) {  // last sequence whose query_start <= t
    int mid = (lo_seq + hi_seq + 1) >> 1;
    if (a.query_start[mid] <= t) {
      lo_seq = mid;
    } else {
      hi_seq = mid - 1;
    }
  }
  int q_len = a.query_start[lo_seq + 1] - a.query_start[lo_seq];
  int pos = a.kv_lens[lo_seq] - q_len + (t - a.query_start[lo_seq]);
  int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  return {lo_seq, q_len, lo, pos + 1};
}

template <int kHeadDim>
__global__ void __launch_bounds__(kWarps * 32)
    attention_split_kernel(PagedAttentionArgs a, float* partial_o, float* partial_ml,
                           int skip_q_len) {
  // Output elements each lane owns; below 32 dims only the first kHeadDim lanes own one.
  constexpr int kEpl = kHeadDim >= 32 ? kHeadDim / 32 : 1;
  __shared__ __align__(16) float q_s[kHeadDim];
  __shared__ float warp_m[kWarps];
  __shared__ float warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kHeadDim];

  int t = blockIdx.x;
  int h = blockIdx.y;
  int split = blockIdx.z;
  int lane = threadIdx.x & 31;
  int warp = threadIdx.x >> 5;
  KeyRange range = key_range(a, t);
  if (skip_q_len > 0 && range.q_len >= skip_q_len) return;  // the tiled kernel's token
  int span = max(range.hi - range.lo, 0);
  int chunk = detail::ceil_div(span, a.num_splits);
  int s_lo = range.lo + split * chunk;
  int s_hi = min(range.hi, s_lo + chunk);
  int kv_head = h / (a.q_heads / a.kv_heads);
  const int32_t* table = a.block_tables + range.seq * a.ld_block_tables;

  const __nv_bfloat16* q = a.q + t * a.ld_q + h * kHeadDim;
  for (int i = threadIdx.x; i < kHeadDim; i += blockDim.x) {
    q_s[i] = __bfloat162float(q[i]) * a.scale;
  }
  __syncthreads();

  float m = -INFINITY;
  float l = 0.0f;
  float acc[kEpl];
#pragma unroll
  for (int e = 0; e < kEpl; ++e) acc[e] = 0.0f;

  for (int tile = s_lo + warp * 32; tile < s_hi; tile += kWarps * 32) {
    int j = tile + lane;
    bool valid = j < s_hi;
    int64_t slot = 0;
    float score = -INFINITY;
    if (valid) {
      int block = table[j / a.block_size];
      slot = static_cast<int64_t>(block) * a.block_size + j % a.block_size;
      const __nv_bfloat16* k = a.k_cache + (slot * a.kv_heads + kv_head) * kHeadDim;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kHeadDim; i += 8) {
        float kf[8];
        detail::load_bf16<8>(k + i, kf);
        float4 q0 = *reinterpret_cast<const float4*>(q_s + i);
        float4 q1 = *reinterpret_cast<const float4*>(q_s + i + 4);
        dot += kf[0] * q0.x + kf[1] * q0.y + kf[2] * q0.z + kf[3] * q0.w + kf[4] * q1.x +
               kf[5] * q1.y + kf[6] * q1.z + kf[7] * q1.w;
      }
      if (a.softcap > 0.0f) dot = a.softcap * tanhf(dot / a.softcap);
      score = dot * detail::kLog2e;
    }
    float tile_max = detail::warp_max(score);
    if (tile_max == -INFINITY) continue;
    float m_new = fmaxf(m, tile_max);
    float corr = exp2f(m - m_new);
    float p = valid ? exp2f(score - m_new) : 0.0f;
    l = l * corr + detail::warp_sum(p);
    m = m_new;
#pragma unroll
    for (int e = 0; e < kEpl; ++e) acc[e] *= corr;
    int count = min(32, s_hi - tile);
#pragma unroll 4
    for (int jj = 0; jj < count; ++jj) {
      float pj = __shfl_sync(detail::kFullMask, p, jj);
      int64_t slot_j = __shfl_sync(detail::kFullMask, slot, jj);
      if (lane * kEpl < kHeadDim) {
        const __nv_bfloat16* v = a.v_cache + (slot_j * a.kv_heads + kv_head) * kHeadDim;
        float vf[kEpl];
        detail::load_bf16<kEpl>(v + lane * kEpl, vf);
#pragma unroll
        for (int e = 0; e < kEpl; ++e) acc[e] += pj * vf[e];
      }
    }
  }

  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  if (lane * kEpl < kHeadDim) {
#pragma unroll
    for (int e = 0; e < kEpl; ++e) warp_acc[warp][lane * kEpl + e] = acc[e];
  }
  __syncthreads();

  float big_m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) big_m = fmaxf(big_m, warp_m[w]);
  float weight[kWarps];
  float big_l = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = warp_l[w] > 0.0f ? exp2f(warp_m[w] - big_m) : 0.0f;
    big_l += warp_l[w] * weight[w];
  }
  float inv_l = big_l > 0.0f ? 1.0f / big_l : 0.0f;
  for (int i = threadIdx.x; i < kHeadDim; i += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += warp_acc[w][i] * weight[w];
    o *= inv_l;
    if (a.num_splits == 1) {
      a.out[t * a.ld_out + h * kHeadDim + i] = __float2bfloat16(o);
    } else {
      partial_o[((static_cast<int64_t>(split) * a.tokens + t) * a.q_heads + h) * kHeadDim + i] = o;
    }
  }
  if (a.num_splits > 1 && threadIdx.x == 0) {
    int64_t idx = (static_cast<int64_t>(split) * a.tokens + t) * a.q_heads + h;
    partial_ml[2 * idx] = big_m;
    partial_ml[2 * idx + 1] = big_l;
  }
}

// Merges the splits of one (token, head): weights l_s * 2^(m_s - max m).
__global__ void attention_combine_kernel(PagedAttentionArgs a, const float* partial_o,
                                         const float* partial_ml, int skip_q_len) {
  int t = blockIdx.x;
  int h = blockIdx.y;
  if (skip_q_len > 0 && key_range(a, t).q_len >= skip_q_len) return;
  int64_t stride = static_cast<int64_t>(a.tokens) * a.q_heads;
  int64_t base = static_cast<int64_t>(t) * a.q_heads + h;
  float big_m = -INFINITY;
  for (int s = 0; s < a.num_splits; ++s) {
    if (partial_ml[2 * (s * stride + base) + 1] > 0.0f) {
      big_m = fmaxf(big_m, partial_ml[2 * (s * stride + base)]);
    }
  }
  float total = 0.0f;
  for (int s = 0; s < a.num_splits; ++s) {
    float l = partial_ml[2 * (s * stride + base) + 1];
    if (l > 0.0f) total += l * exp2f(partial_ml[2 * (s * stride + base)] - big_m);
  }
  float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < a.num_splits; ++s) {
      float l = partial_ml[2 * (s * stride + base) + 1];
      if (l > 0.0f) {
        float w = l * exp2f(partial_ml[2 * (s * stride + base)] - big_m);
        o += w * partial_o[(s * stride + base) * a.head_dim + i];
      }
    }
    a.out[t * a.ld_out + h * a.head_dim + i] = __float2bfloat16(o * inv_total);
  }
}

template <int kHeadDim>
cudaError_t launch(const PagedAttentionArgs& a, cudaStream_t stream) {
  int skip_q_len = 0;
  if (detail::paged_attention_tiled_supported(a.head_dim) && a.ld_q % 2 == 0 && a.ld_out % 2 == 0) {
    cudaError_t err = detail::paged_attention_tiled(a, stream);
    if (err != cudaSuccess) return err;
    skip_q_len = detail::kTiledMinQueries;
  }
  float* partial_o = a.workspace;
  float* partial_ml = a.workspace == nullptr ? nullptr
                                             : a.workspace + static_cast<int64_t>(a.num_splits) *
                                                                 a.tokens * a.q_heads * a.head_dim;
  dim3 grid(a.tokens, a.q_heads, a.num_splits);
  attention_split_kernel<kHeadDim>
      <<<grid, kWarps * 32, 0, stream>>>(a, partial_o, partial_ml, skip_q_len);
  if (a.num_splits > 1) {
    attention_combine_kernel<<<dim3(a.tokens, a.q_heads), 128, 0, stream>>>(a, partial_o,
                                                                            partial_ml, skip_q_len);
  }
  return cudaGetLastError();
}

}  // namespace

int paged_attention_num_splits(int tokens, int q_heads, int max_kv_len, int sm_count) {
  int64_t blocks = static_cast<int64_t>(tokens) * q_heads;
  int64_t wanted = 4LL * sm_count;  // four resident blocks per SM hide the latency
  if (blocks >= wanted) return 1;
  int splits = static_cast<int>((wanted + blocks - 1) / blocks);
  int by_length = max(1, max_kv_len / 256);  // keep >= 256 keys per split
  return max(1, min(min(splits, by_length), 64));
}

size_t paged_attention_workspace_bytes(int tokens, int q_heads, int head_dim, int num_splits) {
  if (num_splits <= 1) return 0;
  size_t rows = static_cast<size_t>(num_splits) * tokens * q_heads;
  return rows * (head_dim + 2) * sizeof(float);
}

cudaError_t paged_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.seqs <= 0 || a.tokens < 0 || a.q_heads <= 0 || a.kv_heads <= 0 ||
      a.q_heads % a.kv_heads != 0 || a.block_size <= 0 || a.num_splits < 1 || a.q_heads > 65535 ||
      a.num_splits > 65535 || a.ld_q < static_cast<int64_t>(a.q_heads) * a.head_dim ||
      a.ld_out < static_cast<int64_t>(a.q_heads) * a.head_dim ||
      (a.num_splits > 1 && a.workspace == nullptr) || a.sliding_window < 0) {
    return cudaErrorInvalidValue;
  }
  if (a.tokens == 0) return cudaSuccess;
  switch (a.head_dim) {
    case 16:
      return launch<16>(a, stream);
    case 32:
      return launch<32>(a, stream);
    case 64:
      return launch<64>(a, stream);
    case 96:
      return launch<96>(a, stream);
    case 128:
      return launch<128>(a, stream);
    case 160:
      return launch<160>(a, stream);
    case 192:
      return launch<192>(a, stream);
    case 256:
      return launch<256>(a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hearth::cuda
