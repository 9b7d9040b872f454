// Lab: paged decode attention near the memory floor. Baseline: the library's paged_attention
// (one block per (token, q head)); variant "gqa-mma": one block per (token, KV head, split)
// serving up to 8 q heads of the GQA group from one read of K/V, S^T = K·Q^T and
// O^T = V^T·P^T on mma.sync m16n8k16. Each is validated against a naive device reference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace hearth::cuda::lab {
namespace {

using Bf16 = __nv_bfloat16;
using dev::median_ms;

// ---------------------------------------------------------------------------------------
// Variant: GQA-shared mma decode kernel.

constexpr int kGroupHeads = 8;  // q heads per block: the mma's N
constexpr int kKeysPerWarp = 16;

struct KeyRange {
  int seq;
  int q_len;
  int lo;
  int hi;
};

__device__ __forceinline__ KeyRange key_range(const PagedAttentionArgs& a, int t) {
  int lo_seq = 0;
  int hi_seq = a.seqs - 1;
  while (lo_seq < hi_seq) {
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

// key_range with a first guess that token t is sequence t (a pure decode batch): both
// query_start words load at once, and only a miss pays the binary search.
__device__ __forceinline__ KeyRange key_range_guess(const PagedAttentionArgs& a, int t) {
  int guess = min(t, a.seqs - 1);
  int start = a.query_start[guess];
  int end = a.query_start[guess + 1];
  int kv = a.kv_lens[guess];
  if (start <= t && t < end) {
    int pos = kv - (end - start) + (t - start);
    int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
    return {guess, end - start, lo, pos + 1};
  }
  return key_range(a, t);
}

__device__ __forceinline__ void mma_16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <int kDl>
using VecT = std::conditional_t<kDl == 8, uint4, uint2>;

// Read-once K/V rows: bypass L1 (each byte is used by exactly one block).
template <int kDl>
__device__ __forceinline__ VecT<kDl> load_stream(const Bf16* p) {
  VecT<kDl> r;
  if constexpr (kDl == 8) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  }
  return r;
}

// Block (token t, KV head x group chunk, split). Warp w walks keys in steps of 16: lane
// (g = lane/4, tq = lane%4) loads keys g and g+8 of the step, kDl dims at a time at dims
// kDl*(tq + 4c), c < kChunks (16 B loads, 4 lanes cover 64 contiguous bytes). Those
// registers are the A fragments of S^T[16 keys x 8 heads] = K · Q^T (the dims are
// permuted identically in Q's fragments), and, transposed 8x8 by movmatrix, the A
// fragments of O^T[16 dims x 8 heads] += V^T · P^T.
// Block-table entries load one step ahead, K/V through L1::no_allocate loads; kPipe also
// issues the next step's K (after q·k) and V (after p·v) before this step's other work;
// kW warps a block.
// Blocks per SM the register cap allows (the pipelined form holds two steps' K/V).
template <int kHeadDim, bool kPipe>
constexpr int min_blocks() {
  if (kPipe) return kHeadDim <= 64 ? 4 : (kHeadDim <= 128 ? 3 : 2);
  return kHeadDim <= 128 ? 4 : (kHeadDim <= 160 ? 3 : 2);
}

template <int kHeadDim, bool kPipe, int kW>
__global__ void __launch_bounds__(kW * 32, (4 / kW) * min_blocks<kHeadDim, kPipe>())
    gqa_decode_kernel(PagedAttentionArgs a, float* partial_o, float* partial_ml, int skip_q_len) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Our merge kernel (launched programmatically dependent) may start its prologue now. With
  // one split the next kernel is someone else's: it waits for our completion, so its blocks
  // do not sit on SMs this grid's later waves need.
  if (a.num_splits > 1) asm volatile("griddepcontrol.launch_dependents;");
#endif
  constexpr int kDl = kHeadDim >= 32 ? 8 : 4;    // bf16 per load
  constexpr int kChunks = kHeadDim / (4 * kDl);  // loads per key row per lane
  constexpr int kWords = kDl / 2;                // 32-bit words per load
  constexpr int kHalves = kDl / 4;               // k-steps (and m-tiles) per load
  constexpr int kSteps = kHeadDim / 16;          // k-steps of S^T, m-tiles of O^T
  constexpr int kQStride = kHeadDim + 8;         // bf16 per q row in shared memory
  constexpr int kOStride = kHeadDim + 4;         // floats per output row in shared memory
  using Vec = VecT<kDl>;

  __shared__ __align__(16) Bf16 q_s[kGroupHeads * kQStride];
  __shared__ float o_s[kW][kGroupHeads * kOStride];
  __shared__ float m_s[kW][kGroupHeads];
  __shared__ float l_s[kW][kGroupHeads];

  const int t = blockIdx.x;
  const int group = a.q_heads / a.kv_heads;
  const int chunks_per_kv = (group + kGroupHeads - 1) / kGroupHeads;
  const int kv_head = blockIdx.y / chunks_per_kv;
  const int chunk = blockIdx.y % chunks_per_kv;
  const int head0 = kv_head * group + chunk * kGroupHeads;
  const int heads = min(kGroupHeads, group - chunk * kGroupHeads);
  const int split = blockIdx.z;
  // q first: it does not depend on the sequence lookup, so both round trips overlap.
  constexpr int kQPerThread = kGroupHeads * kHeadDim / (kW * 32);
  Bf16 q_r[kQPerThread];
#pragma unroll
  for (int u = 0; u < kQPerThread; ++u) {
    int i = threadIdx.x + u * kW * 32;
    int hh = i / kHeadDim;
    q_r[u] = hh < heads ? a.q[t * a.ld_q + (head0 + hh) * kHeadDim + (i - hh * kHeadDim)]
                        : __float2bfloat16(0.0f);
  }
  const KeyRange range = key_range_guess(a, t);
  if (skip_q_len > 0 && range.q_len >= skip_q_len) return;
  const int span = max(range.hi - range.lo, 0);
  int per_split = (span + a.num_splits - 1) / a.num_splits;
  per_split = (per_split + kKeysPerWarp - 1) / kKeysPerWarp * kKeysPerWarp;
  const int s_lo = range.lo + split * per_split;
  const int s_hi = min(range.hi, s_lo + per_split);
#pragma unroll
  for (int u = 0; u < kQPerThread; ++u) {
    int i = threadIdx.x + u * kW * 32;
    int hh = i / kHeadDim;
    q_s[hh * kQStride + (i - hh * kHeadDim)] = q_r[u];
  }
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int tq = lane & 3;

  // Q^T fragments (B of the first mma): head g, dims permuted like K's registers.
  uint32_t qb[kSteps][2];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      int base = kDl * (tq + 4 * c) + 4 * h;
      qb[c * kHalves + h][0] = *reinterpret_cast<const uint32_t*>(&q_s[g * kQStride + base]);
      qb[c * kHalves + h][1] = *reinterpret_cast<const uint32_t*>(&q_s[g * kQStride + base + 2]);
    }
  }

  const bool capped = a.softcap > 0.0f;
  const float score_mul = capped ? a.scale / a.softcap : a.scale * detail::kLog2e;
  const float cap_mul = a.softcap * detail::kLog2e;

  float m0 = -INFINITY, m1 = -INFINITY;  // running max of heads 2tq, 2tq+1 (base 2)
  float l0 = 0.0f, l1 = 0.0f;            // this lane's partial sums
  float acc[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = 0.0f;

  const int32_t* table = a.block_tables + static_cast<int64_t>(range.seq) * a.ld_block_tables;
  const int64_t slot_stride = static_cast<int64_t>(a.kv_heads) * kHeadDim;
  const Bf16* k_base = a.k_cache + kv_head * kHeadDim + kDl * tq;
  const Bf16* v_base = a.v_cache + kv_head * kHeadDim + kDl * tq;

  constexpr int kStride = kW * kKeysPerWarp;
  auto entry = [&](int j) { return j < s_hi ? table[j / a.block_size] : 0; };
  auto offset = [&](int j, int e) -> int64_t {
    return j < s_hi ? (static_cast<int64_t>(e) * a.block_size + j % a.block_size) * slot_stride : 0;
  };
  int tile = s_lo + warp * kKeysPerWarp;
  int e0 = entry(tile + g);
  int e1 = entry(tile + g + 8);
  Vec k0[kChunks], k1[kChunks], v0[kChunks], v1[kChunks];
  if (kPipe && tile < s_hi) {  // kPipe: the next step's K/V load while this one computes
    const int64_t off0 = offset(tile + g, e0);
    const int64_t off1 = offset(tile + g + 8, e1);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      k0[c] = load_stream<kDl>(k_base + off0 + 4 * kDl * c);
      k1[c] = load_stream<kDl>(k_base + off1 + 4 * kDl * c);
      v0[c] = load_stream<kDl>(v_base + off0 + 4 * kDl * c);
      v1[c] = load_stream<kDl>(v_base + off1 + 4 * kDl * c);
    }
    e0 = entry(tile + kStride + g);
    e1 = entry(tile + kStride + g + 8);
  }
  for (; tile < s_hi; tile += kStride) {
    const int j0 = tile + g;
    const int j1 = j0 + 8;
    const bool ok0 = j0 < s_hi;
    const bool ok1 = j1 < s_hi;
    const int next = tile + kStride;
    if (!kPipe) {
      const int64_t off0 = offset(j0, e0);
      const int64_t off1 = offset(j1, e1);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        k0[c] = load_stream<kDl>(k_base + off0 + 4 * kDl * c);
        k1[c] = load_stream<kDl>(k_base + off1 + 4 * kDl * c);
        v0[c] = load_stream<kDl>(v_base + off0 + 4 * kDl * c);
        v1[c] = load_stream<kDl>(v_base + off1 + 4 * kDl * c);
      }
      e0 = entry(j0 + kStride);
      e1 = entry(j1 + kStride);
    }
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // S[key j0][2tq, 2tq+1], S[key j1][2tq, 2tq+1]
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t* r0 = reinterpret_cast<const uint32_t*>(&k0[c]);
      const uint32_t* r1 = reinterpret_cast<const uint32_t*>(&k1[c]);
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        mma_16816(s, r0[2 * h], r1[2 * h], r0[2 * h + 1], r1[2 * h + 1], qb[c * kHalves + h][0],
                  qb[c * kHalves + h][1]);
      }
    }
    int64_t noff0 = 0;
    int64_t noff1 = 0;
    if (kPipe && next < s_hi) {
      noff0 = offset(next + g, e0);
      noff1 = offset(next + g + 8, e1);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        k0[c] = load_stream<kDl>(k_base + noff0 + 4 * kDl * c);
        k1[c] = load_stream<kDl>(k_base + noff1 + 4 * kDl * c);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[i] = capped ? cap_mul * tanhf(s[i] * score_mul) : s[i] * score_mul;
    }
    if (!ok0) s[0] = s[1] = -INFINITY;
    if (!ok1) s[2] = s[3] = -INFINITY;
    float x0 = fmaxf(s[0], s[2]);
    float x1 = fmaxf(s[1], s[3]);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      x0 = fmaxf(x0, __shfl_xor_sync(detail::kFullMask, x0, off));
      x1 = fmaxf(x1, __shfl_xor_sync(detail::kFullMask, x1, off));
    }
    // Key j = tile (g = 0) is always valid, so x0, x1 are finite.
    const float n0 = fmaxf(m0, x0);
    const float n1 = fmaxf(m1, x1);
    const float c0 = exp2f(m0 - n0);
    const float c1 = exp2f(m1 - n1);
    m0 = n0;
    m1 = n1;
    const float p0 = exp2f(s[0] - n0);
    const float p1 = exp2f(s[1] - n1);
    const float p2 = exp2f(s[2] - n0);
    const float p3 = exp2f(s[3] - n1);
    l0 = l0 * c0 + p0 + p2;
    l1 = l1 * c1 + p1 + p3;
#pragma unroll
    for (int st = 0; st < kSteps; ++st) {
      acc[st][0] *= c0;
      acc[st][1] *= c1;
      acc[st][2] *= c0;
      acc[st][3] *= c1;
    }
    const uint32_t pb0 = transpose8x8(pack_bf16(p0, p1));
    const uint32_t pb1 = transpose8x8(pack_bf16(p2, p3));
    // Invalid keys have p = 0 but their V registers hold whatever slot 0 holds: zero them
    // so 0 * inf/nan cannot leak in.
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      uint32_t* r0 = reinterpret_cast<uint32_t*>(&v0[c]);
      uint32_t* r1 = reinterpret_cast<uint32_t*>(&v1[c]);
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        if (!ok0) r0[w] = 0u;
        if (!ok1) r1[w] = 0u;
      }
#pragma unroll
      for (int jp = 0; jp < kHalves; ++jp) {
        mma_16816(acc[c * kHalves + jp], transpose8x8(r0[2 * jp]), transpose8x8(r0[2 * jp + 1]),
                  transpose8x8(r1[2 * jp]), transpose8x8(r1[2 * jp + 1]), pb0, pb1);
      }
    }
    if (kPipe && next < s_hi) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        v0[c] = load_stream<kDl>(v_base + noff0 + 4 * kDl * c);
        v1[c] = load_stream<kDl>(v_base + noff1 + 4 * kDl * c);
      }
      e0 = entry(next + kStride + g);
      e1 = entry(next + kStride + g + 8);
    }
  }

#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
    l0 += __shfl_xor_sync(detail::kFullMask, l0, off);
    l1 += __shfl_xor_sync(detail::kFullMask, l1, off);
  }
  if (g == 0) {
    m_s[warp][2 * tq] = m0;
    m_s[warp][2 * tq + 1] = m1;
    l_s[warp][2 * tq] = l0;
    l_s[warp][2 * tq + 1] = l1;
  }
  // acc[c*kHalves + jp]: rows g / g+8 are dims kDl*(g/2 + 4c) + 4jp + (g&1) (+2); columns
  // heads 2tq, 2tq+1.
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int jp = 0; jp < kHalves; ++jp) {
      int d = kDl * (g / 2 + 4 * c) + 4 * jp + (g & 1);
      const float* r = acc[c * kHalves + jp];
      o_s[warp][(2 * tq) * kOStride + d] = r[0];
      o_s[warp][(2 * tq + 1) * kOStride + d] = r[1];
      o_s[warp][(2 * tq) * kOStride + d + 2] = r[2];
      o_s[warp][(2 * tq + 1) * kOStride + d + 2] = r[3];
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < heads * kHeadDim; i += blockDim.x) {
    int hh = i / kHeadDim;
    int d = i - hh * kHeadDim;
    float big_m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      if (l_s[w][hh] > 0.0f) big_m = fmaxf(big_m, m_s[w][hh]);
    }
    float big_l = 0.0f;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      float wt = l_s[w][hh] > 0.0f ? exp2f(m_s[w][hh] - big_m) : 0.0f;
      big_l += l_s[w][hh] * wt;
      o += o_s[w][hh * kOStride + d] * wt;
    }
    o = big_l > 0.0f ? o / big_l : 0.0f;
    int head = head0 + hh;
    if (a.num_splits == 1) {
      a.out[t * a.ld_out + head * kHeadDim + d] = __float2bfloat16(o);
    } else {
      int64_t idx = (static_cast<int64_t>(split) * a.tokens + t) * a.q_heads + head;
      partial_o[idx * kHeadDim + d] = o;
      if (d == 0) {
        partial_ml[2 * idx] = big_m;
        partial_ml[2 * idx + 1] = big_l;
      }
    }
  }
}

// v2's merge: one block per (token, head); the split weights are computed once, in
// parallel over the splits (<= kMaxSplits), then every dim sums its splits with 16 loads in
// flight.
constexpr int kMaxSplits = 256;

__global__ void __launch_bounds__(128) combine2_kernel(PagedAttentionArgs a, const float* partial_o,
                                                       const float* partial_ml, int skip_q_len) {
  __shared__ float w_s[kMaxSplits];
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const int h = blockIdx.y;
  if (skip_q_len > 0 && key_range_guess(a, t).q_len >= skip_q_len) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the split kernel's partials
#endif
  const int64_t stride = static_cast<int64_t>(a.tokens) * a.q_heads;
  const int64_t base = static_cast<int64_t>(t) * a.q_heads + h;
  float m[kMaxSplits / 128];
  float l[kMaxSplits / 128];
  float big_m = -INFINITY;
#pragma unroll
  for (int u = 0; u < kMaxSplits / 128; ++u) {
    int s = threadIdx.x + u * 128;
    m[u] = -INFINITY;
    l[u] = 0.0f;
    if (s < a.num_splits) {
      float2 ml = *reinterpret_cast<const float2*>(&partial_ml[2 * (s * stride + base)]);
      m[u] = ml.x;
      l[u] = ml.y;
    }
    if (l[u] > 0.0f) big_m = fmaxf(big_m, m[u]);
  }
  big_m = detail::block_max(big_m, scratch);
  float total = 0.0f;
#pragma unroll
  for (int u = 0; u < kMaxSplits / 128; ++u) {
    float w = l[u] > 0.0f ? l[u] * exp2f(m[u] - big_m) : 0.0f;
    w_s[threadIdx.x + u * 128] = w;
    total += w;
  }
  total = detail::block_sum(total, scratch);  // its barriers also publish w_s
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
    float o = 0.0f;
    for (int s0 = 0; s0 < a.num_splits; s0 += 16) {
      float v[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        int s = s0 + u;
        v[u] = s < a.num_splits ? partial_o[(s * stride + base) * a.head_dim + i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        if (s0 + u < a.num_splits) o += w_s[s0 + u] * v[u];
      }
    }
    a.out[t * a.ld_out + h * a.head_dim + i] = __float2bfloat16(o * inv_total);
  }
}

template <int kHeadDim, bool kPipe, int kW>
cudaError_t gqa_launch(const PagedAttentionArgs& a, bool pdl, cudaStream_t stream) {
  float* partial_o = a.workspace;
  float* partial_ml = a.workspace == nullptr ? nullptr
                                             : a.workspace + static_cast<int64_t>(a.num_splits) *
                                                                 a.tokens * a.q_heads * a.head_dim;
  int group = a.q_heads / a.kv_heads;
  dim3 grid(a.tokens, a.kv_heads * ((group + kGroupHeads - 1) / kGroupHeads), a.num_splits);
  gqa_decode_kernel<kHeadDim, kPipe, kW><<<grid, kW * 32, 0, stream>>>(a, partial_o, partial_ml, 0);
  if (a.num_splits > 1) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(a.tokens, a.q_heads);
    cfg.blockDim = dim3(128);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, combine2_kernel, a, static_cast<const float*>(partial_o),
                              static_cast<const float*>(partial_ml), 0);
  }
  return cudaGetLastError();
}

template <bool kPipe, int kW = 4>
cudaError_t gqa_attention(const PagedAttentionArgs& a, cudaStream_t stream, bool pdl = false) {
  switch (a.head_dim) {
    case 16:
      return gqa_launch<16, kPipe, kW>(a, pdl, stream);
    case 32:
      return gqa_launch<32, kPipe, kW>(a, pdl, stream);
    case 64:
      return gqa_launch<64, kPipe, kW>(a, pdl, stream);
    case 96:
      return gqa_launch<96, kPipe, kW>(a, pdl, stream);
    case 128:
      return gqa_launch<128, kPipe, kW>(a, pdl, stream);
    case 160:
      return gqa_launch<160, kPipe, kW>(a, pdl, stream);
    case 192:
      return gqa_launch<192, kPipe, kW>(a, pdl, stream);
    case 256:
      return gqa_launch<256, kPipe, kW>(a, pdl, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// ---------------------------------------------------------------------------------------
// Naive reference: scores to global memory, then one block per (token, head).

__global__ void ref_scores_kernel(PagedAttentionArgs a, float* scores, int max_kv) {
  int t = blockIdx.x;
  int h = blockIdx.y;
  KeyRange r = key_range(a, t);
  int kvh = h / (a.q_heads / a.kv_heads);
  const int32_t* table = a.block_tables + static_cast<int64_t>(r.seq) * a.ld_block_tables;
  for (int j = r.lo + threadIdx.x; j < r.hi; j += blockDim.x) {
    int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
    const Bf16* k = a.k_cache + (slot * a.kv_heads + kvh) * a.head_dim;
    const Bf16* q = a.q + t * a.ld_q + h * a.head_dim;
    float dot = 0.0f;
    for (int d = 0; d < a.head_dim; ++d) dot += __bfloat162float(q[d]) * __bfloat162float(k[d]);
    dot *= a.scale;
    if (a.softcap > 0.0f) dot = a.softcap * tanhf(dot / a.softcap);
    scores[(static_cast<int64_t>(t) * a.q_heads + h) * max_kv + j] = dot;
  }
}

// out / mag: [tokens, q_heads * head_dim]; mag = Σ p |v| (the error scale of the sum).
__global__ void ref_output_kernel(PagedAttentionArgs a, const float* scores, int max_kv, float* out,
                                  float* mag) {
  __shared__ float scratch[32];
  int t = blockIdx.x;
  int h = blockIdx.y;
  KeyRange r = key_range(a, t);
  int kvh = h / (a.q_heads / a.kv_heads);
  const int32_t* table = a.block_tables + static_cast<int64_t>(r.seq) * a.ld_block_tables;
  const float* s = scores + (static_cast<int64_t>(t) * a.q_heads + h) * max_kv;
  float mx = -INFINITY;
  for (int j = r.lo + threadIdx.x; j < r.hi; j += blockDim.x) mx = fmaxf(mx, s[j]);
  mx = detail::block_max(mx, scratch);
  float sum = 0.0f;
  for (int j = r.lo + threadIdx.x; j < r.hi; j += blockDim.x) sum += expf(s[j] - mx);
  sum = detail::block_sum(sum, scratch);
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float o = 0.0f;
    float m = 0.0f;
    for (int j = r.lo; j < r.hi; ++j) {
      int64_t slot =
          static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
      float v = __bfloat162float(a.v_cache[(slot * a.kv_heads + kvh) * a.head_dim + d]);
      float p = expf(s[j] - mx);
      o += p * v;
      m += p * fabsf(v);
    }
    int64_t idx = (static_cast<int64_t>(t) * a.q_heads + h) * a.head_dim + d;
    out[idx] = o / sum;
    mag[idx] = m / sum;
  }
}

// ---------------------------------------------------------------------------------------
// A read-only floor: reads exactly the K/V rows decode attention needs (one block per
// (sequence, KV head), 16 B per lane, 8 loads in flight) and reduces them to one word.
// kHeadMajor: the same bytes as if the cache were laid out [block][kv_head][block_size]
// [head_dim] (one head's page contiguous, 4 KB at head_dim 128 and 16-token blocks) instead of
// [slot][kv_head][head_dim] (16 rows of 256 B, 2 KB apart): what that layout would give.
template <bool kHeadMajor>
__global__ void gather_floor_kernel(PagedAttentionArgs a, uint32_t* sink) {
  int seq = blockIdx.x;
  int kvh = blockIdx.y;
  int len = a.kv_lens[seq];
  int per = (len + gridDim.z - 1) / gridDim.z;
  int first = blockIdx.z * per;
  int kv_len = min(len, first + per);
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.ld_block_tables;
  int lanes_per_row = a.head_dim / 8;
  int rows_per_pass = blockDim.x / lanes_per_row;
  int row_in = threadIdx.x / lanes_per_row;
  int col = (threadIdx.x % lanes_per_row) * 8;
  uint32_t x = 0;
  if (row_in < rows_per_pass) {
    for (int j0 = first + row_in; j0 < kv_len; j0 += rows_per_pass * 4) {
      uint4 r[8];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        int j = j0 + u * rows_per_pass;
        const int64_t block = j < kv_len ? table[j / a.block_size] : 0;
        const int64_t in_block = j < kv_len ? j % a.block_size : 0;
        const int64_t off =
            kHeadMajor ? ((block * a.kv_heads + kvh) * a.block_size + in_block) * a.head_dim + col
                       : ((block * a.block_size + in_block) * a.kv_heads + kvh) * a.head_dim + col;
        r[2 * u] = j < kv_len ? __ldg(reinterpret_cast<const uint4*>(a.k_cache + off))
                              : make_uint4(0, 0, 0, 0);
        r[2 * u + 1] = j < kv_len ? __ldg(reinterpret_cast<const uint4*>(a.v_cache + off))
                                  : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) x ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
    }
  }
  if (x == 0x12345678u) sink[0] = x;  // keeps the loads alive
}

// ---------------------------------------------------------------------------------------
// Harness.

struct Case {
  std::string name;
  std::vector<int> q_lens;   // new tokens per sequence
  std::vector<int> kv_lens;  // keys in cache incl. the new tokens
  int q_heads = 32, kv_heads = 8, head_dim = 128, window = 0;
  float softcap = 0.0f;
  int splits = 0;  // 0: each kernel's heuristic
  bool time_it = false;
  bool src_only = false;  // rows the lab copies do not route (long prefill rows)
};

struct Pool {
  Bf16* k = nullptr;
  Bf16* v = nullptr;
  size_t elems = 0;
};

struct Setup {
  Case c;
  int tokens = 0;
  int max_kv = 0;
  int64_t ld_table = 0;
  int rotations = 1;
  int64_t ld_q = 0, ld_out = 0;
  size_t kv_bytes = 0;  // K + V bytes one call needs
  void* q = nullptr;
  void* out = nullptr;
  void* tables = nullptr;  // [rotations][seqs][ld_table]
  void* qs = nullptr;
  void* kl = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 0;
};

template <typename T>
T* dev_upload(const std::vector<T>& v) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(v.size() * sizeof(T), 16)));
  CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

PagedAttentionArgs make_args(const Setup& s, const Pool& pool, int rotation, int splits) {
  const Case& c = s.c;
  PagedAttentionArgs a;
  a.q = static_cast<const Bf16*>(s.q);
  a.ld_q = s.ld_q;
  a.k_cache = pool.k;
  a.v_cache = pool.v;
  a.block_tables = static_cast<const int32_t*>(s.tables) +
                   static_cast<int64_t>(rotation) * c.q_lens.size() * s.ld_table;
  a.ld_block_tables = s.ld_table;
  a.query_start = static_cast<const int32_t*>(s.qs);
  a.kv_lens = static_cast<const int32_t*>(s.kl);
  a.out = static_cast<Bf16*>(s.out);
  a.ld_out = s.ld_out;
  a.seqs = static_cast<int>(c.q_lens.size());
  a.tokens = s.tokens;
  a.q_heads = c.q_heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.block_size = 16;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.softcap = c.softcap;
  a.sliding_window = c.window;
  a.num_splits = splits;
  a.workspace = static_cast<float*>(s.ws);
  return a;
}

Setup make_setup(const Case& c, const Pool& pool, int rotations, cudaStream_t stream) {
  Setup s;
  s.c = c;
  s.rotations = rotations;
  const int bs = 16;
  const int seqs = static_cast<int>(c.q_lens.size());
  std::vector<int32_t> qs(seqs + 1, 0);
  int max_blocks = 0;
  int total_blocks = 0;
  for (int i = 0; i < seqs; ++i) {
    qs[i + 1] = qs[i] + c.q_lens[i];
    s.max_kv = std::max(s.max_kv, c.kv_lens[i]);
    int b = (c.kv_lens[i] + bs - 1) / bs;
    max_blocks = std::max(max_blocks, b);
    total_blocks += b;
    s.kv_bytes += static_cast<size_t>(c.kv_lens[i]) * c.kv_heads * c.head_dim * 2 * 2;
  }
  s.tokens = qs[seqs];
  s.ld_table = max_blocks + 3;
  const int64_t pool_blocks =
      static_cast<int64_t>(pool.elems / (static_cast<size_t>(bs) * c.kv_heads * c.head_dim));
  if (total_blocks > pool_blocks) throw std::runtime_error("pool too small for " + c.name);
  // One random permutation of the pool; rotation r takes the next total_blocks of it, so
  // consecutive timed calls read disjoint blocks (the 60 MB L2 cannot serve them).
  std::vector<int32_t> perm(pool_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(1234);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(rotations) * seqs * s.ld_table, -1);
  int64_t next = 0;
  for (int r = 0; r < rotations; ++r) {
    for (int i = 0; i < seqs; ++i) {
      int b = (c.kv_lens[i] + bs - 1) / bs;
      for (int k = 0; k < b; ++k) {
        tables[(static_cast<size_t>(r) * seqs + i) * s.ld_table + k] = perm[next % pool_blocks];
        ++next;
      }
    }
  }
  const int64_t row = static_cast<int64_t>(c.q_heads) * c.head_dim;
  s.ld_q = c.time_it ? row : row + 40;  // odd strides in the correctness cases
  s.ld_out = c.time_it ? row : row + 24;
  CK(cudaMalloc(&s.q, s.tokens * s.ld_q * 2));
  CK(dev::fill_random_bf16(static_cast<Bf16*>(s.q), s.tokens * s.ld_q, 77 + c.head_dim, 2.0f,
                           stream));
  CK(cudaMalloc(&s.out, s.tokens * s.ld_out * 2));
  s.tables = dev_upload(tables);
  s.qs = dev_upload(qs);
  s.kl = dev_upload(std::vector<int32_t>(c.kv_lens.begin(), c.kv_lens.end()));
  // Workspace for up to 128 splits (either kernel's layout: [splits, tokens, heads, hd + 2]).
  s.ws_bytes = static_cast<size_t>(128) * s.tokens * c.q_heads * (c.head_dim + 2) * 4 + 16;
  CK(cudaMalloc(&s.ws, s.ws_bytes));
  return s;
}

void free_setup(Setup& s) {
  for (void* p : {s.q, s.out, s.tables, s.qs, s.kl, s.ws}) CK(cudaFree(p));
}

struct Check {
  bool ok;
  double rel_l2;
  double worst;  // max |err| / allowed
};

Check validate(const Setup& s, const Pool& pool, int splits,
               cudaError_t (*fn)(const PagedAttentionArgs&, cudaStream_t), cudaStream_t stream) {
  const Case& c = s.c;
  PagedAttentionArgs a = make_args(s, pool, 0, splits);
  const int64_t row = static_cast<int64_t>(c.q_heads) * c.head_dim;
  float* scores = nullptr;
  float* want = nullptr;
  float* mag = nullptr;
  CK(cudaMalloc(&scores, static_cast<size_t>(s.tokens) * c.q_heads * s.max_kv * 4));
  CK(cudaMalloc(&want, s.tokens * row * 4));
  CK(cudaMalloc(&mag, s.tokens * row * 4));
  ref_scores_kernel<<<dim3(s.tokens, c.q_heads), 128, 0, stream>>>(a, scores, s.max_kv);
  ref_output_kernel<<<dim3(s.tokens, c.q_heads), 128, 0, stream>>>(a, scores, s.max_kv, want, mag);
  CK(cudaGetLastError());
  CK(cudaMemsetAsync(s.out, 0xff, s.tokens * s.ld_out * 2, stream));  // NaN poison
  CK(fn(a, stream));
  CK(cudaStreamSynchronize(stream));
  std::vector<float> w(s.tokens * row), m(s.tokens * row);
  std::vector<Bf16> got(s.tokens * s.ld_out);
  CK(cudaMemcpy(w.data(), want, w.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(m.data(), mag, m.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(got.data(), s.out, got.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaFree(scores));
  CK(cudaFree(want));
  CK(cudaFree(mag));
  double num = 0.0, den = 0.0, worst = 0.0;
  bool ok = true;
  for (int t = 0; t < s.tokens; ++t) {
    for (int64_t i = 0; i < row; ++i) {
      double g = __bfloat162float(got[t * s.ld_out + i]);
      double r = w[t * row + i];
      double err = std::fabs(g - r);
      double allowed = m[t * row + i] / 128.0 + std::fabs(r) / 256.0 + 1e-6;
      if (!(err <= allowed)) ok = false;
      if (std::isnan(g)) {
        worst = INFINITY;
      } else {
        worst = std::max(worst, err / allowed);
      }
      num += (g - r) * (g - r);
      den += r * r;
    }
  }
  double rel = std::sqrt(num / std::max(den, 1e-30));
  if (!(rel < 4e-3)) ok = false;
  return {ok, rel, worst};
}

using Fn = cudaError_t (*)(const PagedAttentionArgs&, cudaStream_t);

cudaError_t src_fn(const PagedAttentionArgs& a, cudaStream_t stream) {
  return paged_attention(a, stream);
}
// PDL (sm_90): metadata before the wait, dependents triggered at start; in the 16-call
// graph each call's prologue overlaps the previous call.
cudaError_t src_pdl_fn(const PagedAttentionArgs& a, cudaStream_t stream) {
  PagedAttentionArgs b = a;
  b.pdl = true;
  return paged_attention(b, stream);
}
// 8 warps a block (src picks it only for grids under half the SMs).
cudaError_t src_w8_fn(const PagedAttentionArgs& a, cudaStream_t stream) {
  PagedAttentionArgs b = a;
  b.pdl = true;
  b.block_warps = 8;
  return paged_attention(b, stream);
}
template <int kW, bool kPipe = false>
cudaError_t lab_fn(const PagedAttentionArgs& a, cudaStream_t stream) {
  return gqa_attention<kPipe, kW>(a, stream, true);
}

struct Variant {
  const char* name;
  Fn fn;
};
// src: the library (W1's gqa-mma-pf+pdl graduated). wN: the lab copy with N warps a block;
// pipe: each warp's next K/V loads issue while the current step computes.
constexpr Variant kVariants[] = {{"src", src_fn},
                                 {"src pdl", src_pdl_fn},
                                 {"src pdl w8", src_w8_fn},
                                 {"lab w2", lab_fn<2>},
                                 {"lab w1", lab_fn<1>},
                                 {"lab w4 pipe", lab_fn<4, true>},
                                 {"lab w2 pipe", lab_fn<2, true>},
                                 {"lab w1 pipe", lab_fn<1, true>}};

std::vector<int> random_lens(int n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(n);
  for (int& x : v) x = dist(rng);
  return v;
}

void run() {
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  const double copy_bw = dev::measure_copy_bandwidth(stream);
  std::fflush(stdout);

  Pool pool;
  const size_t pool_bytes = size_t{1} << 30;  // per K and V
  pool.elems = pool_bytes / 2;
  CK(cudaMalloc(&pool.k, pool_bytes));
  CK(cudaMalloc(&pool.v, pool_bytes));
  CK(dev::fill_random_bf16(pool.k, pool.elems, 11, 1.0f, stream));
  CK(dev::fill_random_bf16(pool.v, pool.elems, 12, 1.0f, stream));
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 16));

  // Correctness: every head dim, GQA ratios, windows, softcap, mixed short-prefill rows,
  // explicit split counts, odd ld_q / ld_out.
  std::vector<Case> checks;
  auto add = [&](std::string name, int qh, int kvh, int hd, int win, float cap, int splits) {
    Case c;
    c.name = name;
    c.q_lens = {1, 1, 3, 1, 7, 1, 15};
    c.kv_lens = {1, 17, 40, 300, 129, 1000, 2100};
    c.q_heads = qh;
    c.kv_heads = kvh;
    c.head_dim = hd;
    c.window = win;
    c.softcap = cap;
    c.splits = splits;
    checks.push_back(c);
  };
  add("hd128 g4", 32, 8, 128, 0, 0.0f, 1);
  add("hd128 g4 splits5", 32, 8, 128, 0, 0.0f, 5);
  add("hd128 g1", 8, 8, 128, 0, 0.0f, 3);
  add("hd64 g6 cap50", 12, 2, 64, 0, 50.0f, 1);
  add("hd256 g2 win64 cap30", 8, 4, 256, 64, 30.0f, 3);
  add("hd96 g6 win300", 6, 1, 96, 300, 0.0f, 8);
  add("hd16 g2", 4, 2, 16, 0, 0.0f, 1);
  add("hd32 g4 win40 cap20", 8, 2, 32, 40, 20.0f, 4);
  add("hd160 g3", 6, 2, 160, 0, 0.0f, 2);
  add("hd192 g8", 16, 2, 192, 0, 0.0f, 1);
  add("hd128 g12", 24, 2, 128, 0, 0.0f, 2);
  add("hd128 g16 win17", 32, 2, 128, 17, 0.0f, 64);
  add("hd64 g5", 10, 2, 64, 0, 0.0f, 7);
  bool all_ok = true;
  for (const Case& c : checks) {
    Setup s = make_setup(c, pool, 1, stream);
    std::printf("check %-22s", c.name.c_str());
    for (const Variant& v : kVariants) {
      Check r = validate(s, pool, c.splits, v.fn, stream);
      all_ok = all_ok && r.ok;
      std::printf("  %s %s (rel %.2e, worst %.2f)", v.name, r.ok ? "ok" : "FAIL", r.rel_l2,
                  r.worst);
    }
    std::printf("\n");
    std::fflush(stdout);
    free_setup(s);
  }

  // Timing: the issue's shapes (8B: 32 q heads, 8 KV heads, head_dim 128, block 16).
  std::vector<Case> perf;
  auto add_perf = [&](std::string name, int batch, int lo, int hi) {
    Case c;
    c.name = name;
    c.q_lens.assign(batch, 1);
    c.kv_lens = random_lens(batch, lo, hi, 99 + batch);
    c.time_it = true;
    perf.push_back(c);
  };
  add_perf("b64 ctx192-256", 64, 192, 256);
  add_perf("b256 ctx192-256", 256, 192, 256);
  add_perf("b1 ctx4096", 1, 4096, 4096);
  add_perf("b1 ctx32768", 1, 32768, 32768);
  add_perf("b16 ctx2048", 16, 2048, 2048);
  {  // an engine step: 256 decode rows and two fresh 128-token prompts (the tiled path's)
    Case c = perf[1];
    c.name = "b256+2x128 pre";
    c.q_lens.push_back(128);
    c.q_lens.push_back(128);
    c.kv_lens.push_back(128);
    c.kv_lens.push_back(128);
    c.src_only = true;
    perf.push_back(c);
  }
  for (const Case& c : perf) {
    const int64_t blocks_per_call = [&] {
      int64_t b = 0;
      for (int l : c.kv_lens) b += (l + 15) / 16;
      return b;
    }();
    const int64_t pool_blocks = static_cast<int64_t>(pool.elems / (16 * 8 * 128));
    const int rotations = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(16, pool_blocks / blocks_per_call)));
    Setup s = make_setup(c, pool, rotations, stream);
    const double mb = s.kv_bytes / 1e6;
    auto report = [&](const char* what, int splits, double ms) {
      double bw = s.kv_bytes / (ms * 1e-3);
      std::printf("%-16s %-26s splits=%-3d %8.1f us  %6.1f MB  %.3f TB/s  %5.1f%% of copy\n",
                  c.name.c_str(), what, splits, ms * 1e3, mb, bw / 1e12, 100.0 * bw / copy_bw);
      std::fflush(stdout);
    };
    // Floor: the same rows read by a plain gather.
    {
      int z = std::max(
          1, std::min(4 * sms / (static_cast<int>(c.q_lens.size()) * c.kv_heads), s.max_kv / 64));
      for (const bool head_major : {false, true}) {
        auto gather = [&](int i) {
          PagedAttentionArgs ai = make_args(s, pool, i % rotations, 1);
          if (head_major) {
            gather_floor_kernel<true><<<dim3(ai.seqs, ai.kv_heads, z), 256, 0, stream>>>(ai, sink);
          } else {
            gather_floor_kernel<false><<<dim3(ai.seqs, ai.kv_heads, z), 256, 0, stream>>>(ai, sink);
          }
        };
        report(head_major ? "gather floor head-major" : "gather floor", z,
               median_ms(stream, gather, 30));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < 16; ++i) gather(i);
        CK(cudaStreamEndCapture(stream, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        double ms = median_ms(
                        stream, [&](int) { CK(cudaGraphLaunch(exec, stream)); }, 10) /
                    16;
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        report(head_major ? "gather head-major graph" : "gather floor graph", z, ms);
      }
    }
    // Per call: event-timed single launches, and replays of a graph of 16 calls (what a
    // decode step's graph sees: launch gaps of ~1 us instead of the host's).
    auto time_graph = [&](Fn fn, int splits) {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      double ms = -1.0;
      try {
        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < 16; ++i) CK(fn(make_args(s, pool, i % rotations, splits), stream));
        CK(cudaStreamEndCapture(stream, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        ms = median_ms(
                 stream, [&](int) { CK(cudaGraphLaunch(exec, stream)); }, 10) /
             16;
      } catch (const std::exception& e) {
        std::printf("graph timing failed: %s\n", e.what());
        cudaStreamCaptureStatus status;
        if (cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
            status != cudaStreamCaptureStatusNone) {
          cudaGraph_t broken = nullptr;
          cudaStreamEndCapture(stream, &broken);
          if (broken != nullptr) cudaGraphDestroy(broken);
        }
        cudaGetLastError();
      }
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      if (graph != nullptr) cudaGraphDestroy(graph);
      return ms;
    };
    const int h = paged_attention_num_splits(s.tokens, c.q_heads, c.kv_heads, s.max_kv, sms);
    std::vector<int> tries = {h};
    for (int x : {1, 2, 4, 8, 16, 32, 64, 128}) {
      if (c.src_only) break;
      if (x != h && x * 64 <= s.max_kv && (s.tokens > 16 ? x <= 2 : x >= 8)) tries.push_back(x);
    }
    for (int splits : tries) {
      for (const Variant& v : kVariants) {
        if (c.src_only && v.fn != src_fn && v.fn != src_pdl_fn) {
          continue;
        }
        Check chk = validate(s, pool, splits, v.fn, stream);
        all_ok = all_ok && chk.ok;
        double ms = median_ms(
            stream, [&](int i) { CK(v.fn(make_args(s, pool, i % rotations, splits), stream)); },
            30);
        double gms = time_graph(v.fn, splits);
        std::string what = std::string(v.name) + (chk.ok ? "" : " (INVALID)") +
                           (splits == h ? " [heuristic]" : "");
        report(what.c_str(), splits, ms);
        if (gms > 0) report((what + " graph").c_str(), splits, gms);
      }
    }
    free_setup(s);
  }
  std::printf("decode_attention lab: %s\n", all_ok ? "all variants valid" : "SOME VARIANT FAILED");
  CK(cudaFree(pool.k));
  CK(cudaFree(pool.v));
  CK(cudaFree(sink));
  CK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace hearth::cuda::lab

int main() {
  try {
    hearth::cuda::lab::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lab failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
