// Paged attention for decode rows and short prefill rows: one block per (query token, KV
// head, split) serves up to 8 q heads of the GQA group from a single read of each K/V row,
// with S^T = K·Q^T and O^T = V^T·P^T on mma.sync m16n8k16 (bf16 in, f32 accumulate) and an
// online softmax in base 2. Splits merge in a second kernel; long prefill rows go to the
// tiled kernel (paged_attention_prefill.cu).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_attention_prefill.cuh"
#include "kernels/cuda/pdl.cuh"

namespace hearth::cuda {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kWarps = 4;               // warps a decode block, unless the grid is small
constexpr int kWideWarps = 8;           // small grids (batch 1): fewer 16-key steps per warp
constexpr int kMaxPrefetchKeys = 1024;  // keys a wide block pulls into L2 before its wait
constexpr int kGroupHeads = 8;          // q heads per block: the mma's N
constexpr int kKeysPerWarp = 16;

struct KeyRange {
  int seq;
  int q_len;
  int lo;
  int hi;
  int fresh;  // the sequence's first key this step writes (kv_len - q_len): keys below it
              // were written by earlier steps, so they may load before the PDL wait
};

__device__ __forceinline__ KeyRange key_range_search(const PagedAttentionArgs& a, int t) {
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
  return {lo_seq, q_len, lo, pos + 1, a.kv_lens[lo_seq] - q_len};
}

// The sequence of token t and its visible keys. First guess: token t is sequence t (a pure
// decode batch), so the lookup's loads issue together; a miss pays the binary search.
__device__ __forceinline__ KeyRange key_range(const PagedAttentionArgs& a, int t) {
  int guess = min(t, a.seqs - 1);
  int start = a.query_start[guess];
  int end = a.query_start[guess + 1];
  int kv = a.kv_lens[guess];
  if (start <= t && t < end) {
    int pos = kv - (end - start) + (t - start);
    int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
    return {guess, end - start, lo, pos + 1, kv - (end - start)};
  }
  return key_range_search(a, t);
}

// Invariant splits (split_keys > 0): a query whose keys fit one split is written by the split
// kernel itself whatever the step's split count, and the combine kernel skips it; so a short
// query's bits do not depend on the step's longest query, and a step of short queries is one
// pass.
__device__ __forceinline__ bool one_invariant_split(const PagedAttentionArgs& a,
                                                    const KeyRange& r) {
  return a.split_keys > 0 && r.hi - r.lo <= a.split_keys;
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
// fragments of O^T[16 dims x 8 heads] += V^T · P^T. Wide blocks (kWideWarps) run only in
// grids of at most half the multiprocessors: one a multiprocessor, all its registers.
template <int kHeadDim, int kW>
__global__ void __launch_bounds__(kW * 32,
                                  kW == kWideWarps
                                      ? 1
                                      : (kWarps / kW > 0 ? kWarps / kW : 1) *
                                            (kHeadDim <= 128 ? 4 : (kHeadDim <= 160 ? 3 : 2)))
    decode_kernel(PagedAttentionArgs a, float* partial_o, float* partial_ml, int skip_q_len) {
  // Our merge kernel (launched programmatically dependent) may start its prologue now; under
  // PDL also the caller's next kernel (the decode step's o GEMV streams its first weights
  // while attention runs). That kernel launches only once every block of this grid has
  // started, so it never takes the place of one of ours.
  if (a.num_splits > 1 || a.pdl) detail::launch_dependents();
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
  // The sequence lookup (step metadata, which no kernel writes) loads before the wait on the
  // previous kernel; q with the first block-table entries after it (one round trip), then K/V.
  const KeyRange range = key_range(a, t);
  if (skip_q_len > 0 && range.q_len >= skip_q_len) return;
  const int span = max(range.hi - range.lo, 0);
  int per_split = a.split_keys > 0 ? a.split_keys : (span + a.num_splits - 1) / a.num_splits;
  per_split = (per_split + kKeysPerWarp - 1) / kKeysPerWarp * kKeysPerWarp;
  const int s_lo = range.lo + split * per_split;
  const int s_hi = min(range.hi, s_lo + per_split);
  const bool direct = a.num_splits == 1 || one_invariant_split(a, range);
  if (direct && split > 0) return;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int tq = lane & 3;

  const int32_t* table = a.block_tables + static_cast<int64_t>(range.seq) * a.ld_block_tables;
  const int64_t slot_stride = static_cast<int64_t>(a.kv_heads) * kHeadDim;
  const Bf16* k_base = a.k_cache + kv_head * kHeadDim + kDl * tq;
  const Bf16* v_base = a.v_cache + kv_head * kHeadDim + kDl * tq;

  constexpr int kStride = kW * kKeysPerWarp;
  auto entry = [&](int j) { return j < s_hi ? table[j / a.block_size] : 0; };
  if constexpr (kW == kWideWarps) {
    // Small grids (batch 1) are latency bound: pull the block's K/V rows into L2 before the
    // wait (under PDL, while the previous kernel still runs), so every step after it hits L2.
    // L2 is the point of coherence, so a row the previous kernel writes later stays correct.
    constexpr int kLines = (kHeadDim * 2 + 127) / 128;  // 128-byte lines a K or V row spans
    const int items = min(s_hi - s_lo, kMaxPrefetchKeys) * 2 * kLines;
    for (int i = threadIdx.x; i < items; i += kW * 32) {
      const int key = s_lo + i / (2 * kLines);
      const int rem = i % (2 * kLines);
      const Bf16* row =
          (rem >= kLines ? a.v_cache : a.k_cache) + kv_head * kHeadDim +
          (static_cast<int64_t>(table[key / a.block_size]) * a.block_size + key % a.block_size) *
              slot_stride;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(row) +
                                                    (rem % kLines) * 128));
    }
  }
  // Small grids (batch 1, kWideWarps; latency bound): the warp's first step of K/V rows is
  // loaded around the wait, keys of earlier steps before it (the table is step metadata,
  // which no kernel writes), this step's own keys after it, with q. Wider grids load every
  // step in the loop (holding the rows across q's staging spilled registers at head_dim 128).
  // A key past s_hi loads slot 0's row (never used: its score is -inf, its V zeroed).
  constexpr bool kEarlyRows = kW == kWideWarps;
  const int tile0 = s_lo + warp * kKeysPerWarp;
  Vec k0[kChunks], k1[kChunks], v0[kChunks], v1[kChunks];
  auto load_key = [&](Vec(&kr)[kChunks], Vec(&vr)[kChunks], int j, int e) {
    const int64_t off =
        j < s_hi ? (static_cast<int64_t>(e) * a.block_size + j % a.block_size) * slot_stride : 0;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      kr[c] = load_stream<kDl>(k_base + off + 4 * kDl * c);
      vr[c] = load_stream<kDl>(v_base + off + 4 * kDl * c);
    }
  };
  int e0 = entry(tile0 + g);
  int e1 = entry(tile0 + g + 8);
  if (kEarlyRows && tile0 < s_hi) {
    if (tile0 + g < range.fresh) load_key(k0, v0, tile0 + g, e0);
    if (tile0 + g + 8 < range.fresh) load_key(k1, v1, tile0 + g + 8, e1);
  }
  detail::grid_dependency_wait();  // q and this step's K/V rows come from the previous kernel
  constexpr int kQPerThread = kGroupHeads * kHeadDim / (kW * 32);
  static_assert(kQPerThread * kW * 32 == kGroupHeads * kHeadDim, "q staging covers the group");
  Bf16 q_r[kQPerThread];
#pragma unroll
  for (int u = 0; u < kQPerThread; ++u) {
    int i = threadIdx.x + u * kW * 32;
    int hh = i / kHeadDim;
    q_r[u] = hh < heads ? a.q[t * a.ld_q + (head0 + hh) * kHeadDim + (i - hh * kHeadDim)]
                        : __float2bfloat16(0.0f);
  }
  if (kEarlyRows && tile0 < s_hi) {
    if (tile0 + g >= range.fresh) load_key(k0, v0, tile0 + g, e0);
    if (tile0 + g + 8 >= range.fresh) load_key(k1, v1, tile0 + g + 8, e1);
  }
  // Block-table entries of the warp's next step are loaded one step ahead.
  if constexpr (kEarlyRows) {
    e0 = entry(tile0 + g + kStride);
    e1 = entry(tile0 + g + 8 + kStride);
  }
#pragma unroll
  for (int u = 0; u < kQPerThread; ++u) {
    int i = threadIdx.x + u * kW * 32;
    int hh = i / kHeadDim;
    q_s[hh * kQStride + (i - hh * kHeadDim)] = q_r[u];
  }
  __syncthreads();

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

  for (int tile = tile0; tile < s_hi; tile += kStride) {
    const int j0 = tile + g;
    const int j1 = j0 + 8;
    const bool ok0 = j0 < s_hi;
    const bool ok1 = j1 < s_hi;
    if (!kEarlyRows || tile != tile0) {  // kEarlyRows: the first step's rows are loaded
      load_key(k0, v0, j0, e0);
      load_key(k1, v1, j1, e1);
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
    if (direct) {
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

// Merges the splits of one (token, head): weights l_s * 2^(m_s - max m), computed once in
// parallel over the splits; every dim then sums its splits with 16 loads in flight.
constexpr int kMaxSplits = 256;

__global__ void __launch_bounds__(128) combine_kernel(PagedAttentionArgs a, const float* partial_o,
                                                      const float* partial_ml, int skip_q_len) {
  __shared__ float w_s[kMaxSplits];
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const int h = blockIdx.y;
  const KeyRange range = key_range(a, t);
  if (skip_q_len > 0 && range.q_len >= skip_q_len) return;
  // The split kernel's partials. Also before the return below: a grid that could finish
  // before the split kernel would let the next kernel, which waits on this one alone, read
  // rows the split kernel has not yet written.
  detail::grid_dependency_wait();
  if (one_invariant_split(a, range)) return;  // written by the split kernel
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

cudaError_t current_device_attribute(cudaDeviceAttr attr, int* value) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  return cudaDeviceGetAttribute(value, attr, device);
}

template <int kHeadDim>
cudaError_t launch(const PagedAttentionArgs& args, int sm_count, cudaStream_t stream) {
  // PDL only without splits: with them (b1 x 32k, b16 x 2k) the lab's 16-call chains ran
  // 4-6 us slower under it (W1), without them b64 / b256 / the b1 decode step gained.
  PagedAttentionArgs a = args;
  a.pdl = args.pdl && args.num_splits == 1;
  int skip_q_len = 0;
  // Batch-invariant: every query takes the tiled kernel, whose rows are summed the same way
  // in a decode row's tile as in a prompt's (paged_attention_prefill.cuh); head sizes it does
  // not have take the decode kernel below, in one order of their own.
  if (a.batch_invariant && detail::paged_attention_tiled_supported(a.head_dim) && a.ld_q % 2 == 0 &&
      a.ld_out % 2 == 0 && a.split_keys % 64 == 0) {
    return detail::paged_attention_tiled(a, stream);
  }
  // The tiled path has work only when some sequence has kTiledMinQueries new tokens; with at
  // least one token a sequence, that needs tokens - (seqs - 1) of them. Otherwise (decode
  // batches) its grid is not launched at all: its blocks would only search and exit, which
  // measured 125 us at 64 sequences and 650 us at 256 (W3).
  if (!a.batch_invariant && detail::paged_attention_tiled_supported(a.head_dim) &&
      a.ld_q % 2 == 0 && a.ld_out % 2 == 0 && a.tokens - (a.seqs - 1) >= detail::kTiledMinQueries) {
    cudaError_t err = detail::paged_attention_tiled(a, stream);
    if (err != cudaSuccess) return err;
    skip_q_len = detail::kTiledMinQueries;
  }
  float* partial_o = a.workspace;
  float* partial_ml = a.workspace == nullptr ? nullptr
                                             : a.workspace + static_cast<int64_t>(a.num_splits) *
                                                                 a.tokens * a.q_heads * a.head_dim;
  const int group = a.q_heads / a.kv_heads;
  dim3 grid(a.tokens, a.kv_heads * detail::ceil_div(group, kGroupHeads), a.num_splits);
  // A grid under half the SMs (batch 1: 8 blocks for the 8B) is latency bound: 8 warps a
  // block halve the dependent 16-key steps each warp walks (shared memory allows it up to
  // head_dim 128).
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  constexpr bool kWideOk = kHeadDim >= 32 && kHeadDim <= 128;
  cudaError_t launched;
  const bool wide = a.batch_invariant    ? false
                    : a.block_warps == 0 ? 2 * blocks <= sm_count
                                         : a.block_warps == kWideWarps;
  if (kWideOk && wide) {
    launched = detail::launch_kernel(decode_kernel < kHeadDim, kWideOk ? kWideWarps : kWarps >,
                                     grid, dim3(kWideWarps * 32), 0, stream, a.pdl, a, partial_o,
                                     partial_ml, skip_q_len);
  } else {
    launched = detail::launch_kernel(decode_kernel<kHeadDim, kWarps>, grid, dim3(kWarps * 32), 0,
                                     stream, a.pdl, a, partial_o, partial_ml, skip_q_len);
  }
  if (launched != cudaSuccess) return launched;
  if (a.num_splits == 1) return cudaGetLastError();
  // On sm_90 the merge launches while the split kernel drains (griddepcontrol.wait inside).
  int major = 0;
  cudaError_t err = current_device_attribute(cudaDevAttrComputeCapabilityMajor, &major);
  if (err != cudaSuccess) return err;
  return detail::launch_kernel(combine_kernel, dim3(a.tokens, a.q_heads), dim3(128), 0, stream,
                               major >= 9, static_cast<const PagedAttentionArgs&>(a),
                               static_cast<const float*>(partial_o),
                               static_cast<const float*>(partial_ml), skip_q_len);
}

}  // namespace

// Measured on the H200 (dev/cuda/lab_decode_attention.cu): two blocks per SM is enough, and
// a merge kernel costs more than it gains below 128 keys a split (b64 x ctx 224: 1 split
// 26 us, 2 splits 37 us; b1 x 32k: 32 splits 47 us, 64 splits 52 us, 128 splits 59 us).
int paged_attention_num_splits(int tokens, int q_heads, int kv_heads, int max_kv_len,
                               int sm_count) {
  if (tokens <= 0 || kv_heads <= 0 || q_heads < kv_heads) return 1;
  const int64_t blocks =
      static_cast<int64_t>(tokens) * kv_heads * detail::ceil_div(q_heads / kv_heads, kGroupHeads);
  const int64_t wanted = 2LL * sm_count;
  const int64_t splits = (wanted + blocks - 1) / blocks;
  const int64_t by_length = max_kv_len / 128;
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>({splits, by_length, 128}));
  // A power of two: few distinct values, so a growing context keeps its captured graph.
  int p = 1;
  while (2 * p <= n) p *= 2;
  return p;
}

int paged_attention_invariant_splits(int max_kv_len, int* split_keys) {
  const int64_t keys = std::max(max_kv_len, 1);
  const int64_t per =
      kInvariantSplitKeys * ((keys + int64_t(kMaxSplits) * kInvariantSplitKeys - 1) /
                             (int64_t(kMaxSplits) * kInvariantSplitKeys));
  *split_keys = static_cast<int>(per);
  return static_cast<int>((keys + per - 1) / per);
}

int paged_attention_num_splits(int tokens, int q_heads, int max_kv_len, int sm_count) {
  return paged_attention_num_splits(tokens, q_heads, q_heads, max_kv_len, sm_count);
}

// The split kernel's partial rows, or the tiled prefill path's (it runs first, in the same
// stream, so the two share the buffer), whichever is larger.
size_t paged_attention_workspace_bytes(int tokens, int q_heads, int head_dim, int num_splits) {
  size_t split_bytes = 0;
  if (num_splits > 1) {
    size_t rows = static_cast<size_t>(num_splits) * tokens * q_heads;
    split_bytes = rows * (head_dim + 2) * sizeof(float);
  }
  return std::max(split_bytes,
                  detail::paged_attention_tiled_workspace_bytes(tokens, q_heads, head_dim));
}

cudaError_t paged_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.seqs <= 0 || a.tokens < 0 || a.q_heads <= 0 || a.kv_heads <= 0 ||
      a.q_heads % a.kv_heads != 0 || a.block_size <= 0 || a.num_splits < 1 ||
      a.num_splits > kMaxSplits ||
      a.kv_heads * detail::ceil_div(a.q_heads / a.kv_heads, kGroupHeads) > 65535 ||
      a.q_heads > 65535 || a.ld_q < static_cast<int64_t>(a.q_heads) * a.head_dim ||
      a.ld_out < static_cast<int64_t>(a.q_heads) * a.head_dim ||
      (a.num_splits > 1 && a.workspace == nullptr) || a.sliding_window < 0 ||
      (a.block_warps != 0 && a.block_warps != kWarps && a.block_warps != kWideWarps) ||
      a.split_keys < 0 || a.split_keys % kKeysPerWarp != 0 ||
      (a.batch_invariant && a.num_splits != 1 && a.split_keys == 0)) {
    return cudaErrorInvalidValue;
  }
  if (a.tokens == 0) return cudaSuccess;
  int sm_count = 0;
  cudaError_t err = current_device_attribute(cudaDevAttrMultiProcessorCount, &sm_count);
  if (err != cudaSuccess) return err;
  switch (a.head_dim) {
    case 16:
      return launch<16>(a, sm_count, stream);
    case 32:
      return launch<32>(a, sm_count, stream);
    case 64:
      return launch<64>(a, sm_count, stream);
    case 96:
      return launch<96>(a, sm_count, stream);
    case 128:
      return launch<128>(a, sm_count, stream);
    case 160:
      return launch<160>(a, sm_count, stream);
    case 192:
      return launch<192>(a, sm_count, stream);
    case 256:
      return launch<256>(a, sm_count, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hearth::cuda
