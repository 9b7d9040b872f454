// Lab: tiled paged prefill attention. The kernel in src (64x64 tiles, V transposed through
// shared memory, no cp.async) against v2 (ldmatrix fragments, cp.async double-buffered K/V
// gathered through the block table, GQA heads packed into the query tile, split-KV with a
// combine pass when the grid is small). Every variant is checked against a plain f32
// reference kernel first; rates are against the bf16 GEMM rate measured in the same run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_attention_prefill.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;
using detail::kFullMask;
using detail::kLog2e;

// ---------------------------------------------------------------------------------------
// v2 kernel.
namespace v2 {

constexpr int kTileK = 64;
constexpr int kMinTilesPerSplit = 2;
constexpr int kMaxSplits = 64;

struct Geometry {
  int pack;          // q heads of one kv head in a CTA's rows
  int tok_per_tile;  // query tokens per CTA (rows / pack)
  int groups;        // CTAs per kv head (group / pack)
  int max_splits;    // key-range splits; 1: no workspace used
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float fast_exp2(float x) {  // 2^x; -inf -> 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The tile's queries and the keys they see.
struct TileRange {
  int first_token;  // flattened index of the tile's first query
  int q_count;      // queries in the tile
  int pos0;         // position of the first query
  int key_hi;       // one past the last visible key
  int kt_begin;     // first key tile (multiple of kTileK)
  int n_kt;         // key tiles
};

__device__ __forceinline__ TileRange tile_range(const PagedAttentionArgs& a, int seq, int tile,
                                                int tok_per_tile) {
  TileRange r;
  int q_len = a.query_start[seq + 1] - a.query_start[seq];
  int kv_len = a.kv_lens[seq];
  int tile_first = tile * tok_per_tile;
  r.q_count = min(tok_per_tile, q_len - tile_first);
  r.first_token = a.query_start[seq] + tile_first;
  r.pos0 = kv_len - q_len + tile_first;
  r.key_hi = r.pos0 + r.q_count;
  int key_lo = a.sliding_window > 0 ? max(0, r.pos0 - a.sliding_window + 1) : 0;
  r.kt_begin = key_lo / kTileK * kTileK;
  r.n_kt = (r.key_hi - r.kt_begin + kTileK - 1) / kTileK;
  return r;
}

// Splits of one tile's key tiles; the combine pass recomputes the same figure.
__device__ __forceinline__ int tile_splits(int n_kt, int max_splits, int* per) {
  int s = max(1, min(max_splits, n_kt / kMinTilesPerSplit));
  *per = (n_kt + s - 1) / s;
  return (n_kt + *per - 1) / *per;
}

// The (sequence, tile) of grid column idx; tiles of a sequence run longest (last) first.
__device__ __forceinline__ bool find_tile(const PagedAttentionArgs& a, int tok_per_tile, int idx,
                                          int* seq, int* tile) {
  for (int s = 0; s < a.seqs; ++s) {
    int q_len = a.query_start[s + 1] - a.query_start[s];
    if (q_len < detail::kTiledMinQueries) continue;
    int tiles = (q_len + tok_per_tile - 1) / tok_per_tile;
    if (idx < tiles) {
      *seq = s;
      *tile = tiles - 1 - idx;
      return true;
    }
    idx -= tiles;
  }
  return false;
}

template <int kHeadDim, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, 8 / kWarps)
    attention_v2_kernel(PagedAttentionArgs a, Geometry geo, float* part_o, float* part_ml) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kStride = kHeadDim + 8;  // bf16 per K/V row in shared memory
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kSteps = kHeadDim / 16;
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kTileElems = kTileK * kStride;
  constexpr int kKeysPerPass = kThreads / kChunks;
  constexpr int kLoadPasses = (kTileK + kKeysPerPass - 1) / kKeysPerPass;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Bf16* smem = reinterpret_cast<Bf16*>(smem_raw);  // [stage][K, V][kTileK][kStride]

  int seq = 0;
  int tile = 0;
  if (!find_tile(a, geo.tok_per_tile, blockIdx.x, &seq, &tile)) return;
  const TileRange tr = tile_range(a, seq, tile, geo.tok_per_tile);
  const int group = a.q_heads / a.kv_heads;
  const int kv_head = blockIdx.y / geo.groups;
  const int head0 = kv_head * group + (blockIdx.y % geo.groups) * geo.pack;
  const int split = blockIdx.z;
  int per = tr.n_kt;
  int used = 1;
  if (geo.max_splits > 1) used = tile_splits(tr.n_kt, geo.max_splits, &per);
  if (split >= used) return;
  const int kt_first = tr.kt_begin + split * per * kTileK;
  const int kt_count = min(per, tr.n_kt - split * per);
  const int32_t* table = a.block_tables + seq * a.ld_block_tables;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  int row_tok[2];
  int row_head[2];
  int qpos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int m = warp * 16 + g + 8 * r;
    row_tok[r] = m / geo.pack;
    row_head[r] = head0 + m % geo.pack;
    qpos[r] = tr.pos0 + row_tok[r];
  }

  // Q fragments (A operand), zero for rows past the tile's queries.
  uint32_t qf[kSteps][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const Bf16* qrow = a.q + static_cast<int64_t>(tr.first_token + row_tok[r]) * a.ld_q +
                       row_head[r] * kHeadDim + 2 * t;
    bool valid = row_tok[r] < tr.q_count;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      qf[ks][r] = valid ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16) : 0u;
      qf[ks][r + 2] = valid ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16 + 8) : 0u;
    }
  }

  // K/V tile loads: this thread copies chunk c of keys key0 + kKeysPerPass * i.
  const int c = threadIdx.x % kChunks;
  const int key0 = threadIdx.x / kChunks;
  auto load_tile = [&](int stage, int kt) {
    Bf16* ks_ = smem + stage * 2 * kTileElems;
#pragma unroll
    for (int i = 0; i < kLoadPasses; ++i) {
      int key = key0 + i * kKeysPerPass;
      if (kKeysPerPass * kLoadPasses > kTileK && key >= kTileK) break;
      int j = kt + key;
      bool valid = j < tr.key_hi;
      int64_t off = 0;
      if (valid) {
        int64_t slot =
            static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
        off = (slot * a.kv_heads + kv_head) * kHeadDim + c * 8;
      }
      uint32_t dst = smem_u32(ks_ + key * kStride + c * 8);
      cp_async16(dst, a.k_cache + off, valid);
      cp_async16(dst + kTileElems * 2, a.v_cache + off, valid);
    }
  };

  float o[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_raw[2] = {-INFINITY, -INFINITY};  // running max of raw q·k (scale not applied)
  float l[2] = {0.0f, 0.0f};                // this thread's partial row sums
  const float scale2 = a.scale * kLog2e;
  const bool softcap = a.softcap > 0.0f;
  const float cap_in = softcap ? a.scale / a.softcap : 0.0f;
  const float cap_out = softcap ? a.softcap / a.scale : 0.0f;
  const int q_last = tr.pos0 + tr.q_count - 1;

  // ldmatrix lane addresses (bytes) within a K or V tile.
  const uint32_t k_lane = ((((lane >> 4) * 8) + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8) * 2;
  const uint32_t v_lane = (((((lane >> 3) & 1) * 8) + (lane & 7)) * kStride + (lane >> 4) * 8) * 2;
  const uint32_t smem_base = smem_u32(smem);

  load_tile(0, kt_first);
  cp_async_commit();
  for (int it = 0; it < kt_count; ++it) {
    const int kt = kt_first + it * kTileK;
    if (it + 1 < kt_count) {
      load_tile((it + 1) & 1, kt + kTileK);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t k_tile = smem_base + (it & 1) * 2 * kTileElems * 2;
    const uint32_t v_tile = k_tile + kTileElems * 2;

    // S = Q Kᵀ: 16 queries x 64 keys per warp.
    float s[kTileK / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kTileK / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_tile + k_lane + (np * 16 * kStride + ks * 16) * 2);
        mma_bf16(s[2 * np], qf[ks], b[0], b[1]);
        mma_bf16(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }
    if (softcap) {
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = cap_out * tanhf(s[nt][e] * cap_in);
      }
    }
    const bool full =
        kt + kTileK - 1 <= tr.pos0 && (a.sliding_window <= 0 || kt > q_last - a.sliding_window);
    if (!full) {
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int r = e >> 1;
          int j = kt + nt * 8 + 2 * t + (e & 1);
          bool visible = j <= qpos[r] && (a.sliding_window <= 0 || j > qpos[r] - a.sliding_window);
          if (!visible) s[nt][e] = -INFINITY;
        }
      }
    }
    float mx[2] = {m_raw[0], m_raw[1]};
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) {
      mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
    }
    float ms[2];
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
      ms[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * scale2;
      corr[r] = fast_exp2(fmaf(m_raw[r], scale2, -ms[r]));
      m_raw[r] = mx[r];
      l[r] *= corr[r];
    }
    uint32_t pf[kTileK / 16][4];
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) {
      float p0 = fast_exp2(fmaf(s[nt][0], scale2, -ms[0]));
      float p1 = fast_exp2(fmaf(s[nt][1], scale2, -ms[0]));
      float p2 = fast_exp2(fmaf(s[nt][2], scale2, -ms[1]));
      float p3 = fast_exp2(fmaf(s[nt][3], scale2, -ms[1]));
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pf[nt / 2][(nt & 1) * 2 + 0] = pack_bf16(p0, p1);
      pf[nt / 2][(nt & 1) * 2 + 1] = pack_bf16(p2, p3);
    }
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      o[d][0] *= corr[0];
      o[d][1] *= corr[0];
      o[d][2] *= corr[1];
      o[d][3] *= corr[1];
    }
    // O += P V; ldmatrix.trans turns row-major V into B fragments.
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kHeadDim / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, v_tile + v_lane + (kk * 16 * kStride + dp * 16) * 2);
        mma_bf16(o[2 * dp], pf[kk], b[0], b[1]);
        mma_bf16(o[2 * dp + 1], pf[kk], b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is refilled two tiles on
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row_tok[r] >= tr.q_count) continue;
    const int token = tr.first_token + row_tok[r];
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    if (used == 1) {
      Bf16* dst = a.out + static_cast<int64_t>(token) * a.ld_out + row_head[r] * kHeadDim + 2 * t;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        *reinterpret_cast<__nv_bfloat162*>(dst + d * 8) =
            __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
      }
    } else {
      const int64_t idx =
          (static_cast<int64_t>(split) * a.tokens + token) * a.q_heads + row_head[r];
      float* dst = part_o + idx * kHeadDim + 2 * t;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        *reinterpret_cast<float2*>(dst + d * 8) =
            make_float2(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
      }
      if (t == 0) {
        part_ml[2 * idx] = l[r] > 0.0f ? m_raw[r] * scale2 : -INFINITY;
        part_ml[2 * idx + 1] = l[r];
      }
    }
  }
}

// v5: v2 (16 rows per warp, Q in registers, 64-key tiles) with kStages cp.async stages and
// one barrier per tile, the rescale skipped when no row max of the warp moved, shift/mask
// block-table indexing, and (kSwap) head groups on grid x (global longest-first).
template <int kHeadDim, int kWarps, int kStages, bool kSwap>
__global__ void __launch_bounds__(kWarps * 32, 8 / kWarps)
    attention_v5_kernel(PagedAttentionArgs a, Geometry geo, float* part_o, float* part_ml) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kStride = kHeadDim + 8;  // bf16 per K/V row in shared memory
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kSteps = kHeadDim / 16;
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kTileElems = kTileK * kStride;
  constexpr int kKeysPerPass = kThreads / kChunks;
  constexpr int kLoadPasses = (kTileK + kKeysPerPass - 1) / kKeysPerPass;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Bf16* smem = reinterpret_cast<Bf16*>(smem_raw);  // [stage][K, V][kTileK][kStride]

  int seq = 0;
  int tile = 0;
  const int col = kSwap ? blockIdx.y : blockIdx.x;
  const int head_group = kSwap ? blockIdx.x : blockIdx.y;
  if (!find_tile(a, geo.tok_per_tile, col, &seq, &tile)) return;
  const TileRange tr = tile_range(a, seq, tile, geo.tok_per_tile);
  const int group = a.q_heads / a.kv_heads;
  const int kv_head = head_group / geo.groups;
  const int head0 = kv_head * group + (head_group % geo.groups) * geo.pack;
  const int split = blockIdx.z;
  int per = tr.n_kt;
  int used = 1;
  if (geo.max_splits > 1) used = tile_splits(tr.n_kt, geo.max_splits, &per);
  if (split >= used) return;
  const int kt_first = tr.kt_begin + split * per * kTileK;
  const int kt_count = min(per, tr.n_kt - split * per);
  const int32_t* table = a.block_tables + seq * a.ld_block_tables;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  int row_tok[2];
  int row_head[2];
  int qpos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int m = warp * 16 + g + 8 * r;
    row_tok[r] = m / geo.pack;
    row_head[r] = head0 + m % geo.pack;
    qpos[r] = tr.pos0 + row_tok[r];
  }

  // Q fragments (A operand), zero for rows past the tile's queries.
  uint32_t qf[kSteps][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const Bf16* qrow = a.q + static_cast<int64_t>(tr.first_token + row_tok[r]) * a.ld_q +
                       row_head[r] * kHeadDim + 2 * t;
    bool valid = row_tok[r] < tr.q_count;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      qf[ks][r] = valid ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16) : 0u;
      qf[ks][r + 2] = valid ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16 + 8) : 0u;
    }
  }

  // K/V tile loads: this thread copies chunk c of keys key0 + kKeysPerPass * i.
  const int c = threadIdx.x % kChunks;
  const int key0 = threadIdx.x / kChunks;
  const int bs_shift = (a.block_size & (a.block_size - 1)) == 0 ? __ffs(a.block_size) - 1 : -1;
  const int64_t slot_stride = static_cast<int64_t>(a.kv_heads) * kHeadDim;
  const int64_t head_off = static_cast<int64_t>(kv_head) * kHeadDim + c * 8;
  auto load_tile = [&](int stage, int kt) {
    Bf16* ks_ = smem + stage * 2 * kTileElems;
#pragma unroll
    for (int i = 0; i < kLoadPasses; ++i) {
      int key = key0 + i * kKeysPerPass;
      if (kKeysPerPass * kLoadPasses > kTileK && key >= kTileK) break;
      int j = kt + key;
      bool valid = j < tr.key_hi;
      int64_t off = 0;
      if (valid) {
        int block;
        int within;
        if (bs_shift >= 0) {
          block = table[j >> bs_shift];
          within = j & (a.block_size - 1);
        } else {
          block = table[j / a.block_size];
          within = j % a.block_size;
        }
        off = (static_cast<int64_t>(block) * a.block_size + within) * slot_stride + head_off;
      }
      uint32_t dst = smem_u32(ks_ + key * kStride + c * 8);
      cp_async16(dst, a.k_cache + off, valid);
      cp_async16(dst + kTileElems * 2, a.v_cache + off, valid);
    }
  };

  float o[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_raw[2] = {-INFINITY, -INFINITY};  // running max of raw q·k (scale not applied)
  float l[2] = {0.0f, 0.0f};                // this thread's partial row sums
  const float scale2 = a.scale * kLog2e;
  const bool softcap = a.softcap > 0.0f;
  const float cap_in = softcap ? a.scale / a.softcap : 0.0f;
  const float cap_out = softcap ? a.softcap / a.scale : 0.0f;
  const int q_last = tr.pos0 + tr.q_count - 1;

  // ldmatrix lane addresses (bytes) within a K or V tile.
  const uint32_t k_lane = ((((lane >> 4) * 8) + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8) * 2;
  const uint32_t v_lane = (((((lane >> 3) & 1) * 8) + (lane & 7)) * kStride + (lane >> 4) * 8) * 2;
  const uint32_t smem_base = smem_u32(smem);

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < kt_count) load_tile(st, kt_first + st * kTileK);
    cp_async_commit();
  }
  for (int it = 0; it < kt_count; ++it) {
    const int kt = kt_first + it * kTileK;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile it landed for all threads; stage (it - 1) % kStages is free
    if (it + kStages - 1 < kt_count) {
      load_tile((it + kStages - 1) % kStages, kt + (kStages - 1) * kTileK);
    }
    cp_async_commit();
    const uint32_t k_tile = smem_base + (it % kStages) * 2 * kTileElems * 2;
    const uint32_t v_tile = k_tile + kTileElems * 2;

    // S = Q Kᵀ: 16 queries x 64 keys per warp.
    float s[kTileK / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < kTileK / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_tile + k_lane + (np * 16 * kStride + ks * 16) * 2);
        mma_bf16(s[2 * np], qf[ks], b[0], b[1]);
        mma_bf16(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }
    if (softcap) {
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = cap_out * tanhf(s[nt][e] * cap_in);
      }
    }
    const bool full =
        kt + kTileK - 1 <= tr.pos0 && (a.sliding_window <= 0 || kt > q_last - a.sliding_window);
    if (!full) {
#pragma unroll
      for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int r = e >> 1;
          int j = kt + nt * 8 + 2 * t + (e & 1);
          bool visible = j <= qpos[r] && (a.sliding_window <= 0 || j > qpos[r] - a.sliding_window);
          if (!visible) s[nt][e] = -INFINITY;
        }
      }
    }
    float mx[2] = {m_raw[0], m_raw[1]};
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) {
      mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
    }
    float ms[2];
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
      ms[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * scale2;
      corr[r] = fast_exp2(fmaf(m_raw[r], scale2, -ms[r]));
      m_raw[r] = mx[r];
      l[r] *= corr[r];
    }
    uint32_t pf[kTileK / 16][4];
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) {
      float p0 = fast_exp2(fmaf(s[nt][0], scale2, -ms[0]));
      float p1 = fast_exp2(fmaf(s[nt][1], scale2, -ms[0]));
      float p2 = fast_exp2(fmaf(s[nt][2], scale2, -ms[1]));
      float p3 = fast_exp2(fmaf(s[nt][3], scale2, -ms[1]));
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pf[nt / 2][(nt & 1) * 2 + 0] = pack_bf16(p0, p1);
      pf[nt / 2][(nt & 1) * 2 + 1] = pack_bf16(p2, p3);
    }
    if (__any_sync(kFullMask, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o[d][0] *= corr[0];
        o[d][1] *= corr[0];
        o[d][2] *= corr[1];
        o[d][3] *= corr[1];
      }
    }
    // O += P V; ldmatrix.trans turns row-major V into B fragments.
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kHeadDim / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, v_tile + v_lane + (kk * 16 * kStride + dp * 16) * 2);
        mma_bf16(o[2 * dp], pf[kk], b[0], b[1]);
        mma_bf16(o[2 * dp + 1], pf[kk], b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row_tok[r] >= tr.q_count) continue;
    const int token = tr.first_token + row_tok[r];
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    if (used == 1) {
      Bf16* dst = a.out + static_cast<int64_t>(token) * a.ld_out + row_head[r] * kHeadDim + 2 * t;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        *reinterpret_cast<__nv_bfloat162*>(dst + d * 8) =
            __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
      }
    } else {
      const int64_t idx =
          (static_cast<int64_t>(split) * a.tokens + token) * a.q_heads + row_head[r];
      float* dst = part_o + idx * kHeadDim + 2 * t;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        *reinterpret_cast<float2*>(dst + d * 8) =
            make_float2(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
      }
      if (t == 0) {
        part_ml[2 * idx] = l[r] > 0.0f ? m_raw[r] * scale2 : -INFINITY;
        part_ml[2 * idx + 1] = l[r];
      }
    }
  }
}

// v3: 32 query rows per warp (two m16 tiles share every K/V fragment), Q in shared memory
// read by ldmatrix, kTileKeys keys per tile; 4 warps = 128 rows per block.
template <int kHeadDim, int kTileKeys>
__global__ void __launch_bounds__(128, 2)
    attention_v3_kernel(PagedAttentionArgs a, Geometry geo, float* part_o, float* part_ml) {
  constexpr int kThreads = 128;
  constexpr int kRowsPerBlock = 128;
  constexpr int kStride = kHeadDim + 8;
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kSteps = kHeadDim / 16;
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kKeyTiles = kTileKeys / 8;
  constexpr int kTileElems = kTileKeys * kStride;
  constexpr int kKeysPerPass = kThreads / kChunks;
  constexpr int kLoadPasses = (kTileKeys + kKeysPerPass - 1) / kKeysPerPass;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Bf16* q_s = reinterpret_cast<Bf16*>(smem_raw);  // [128][kStride]
  Bf16* kv_s = q_s + kRowsPerBlock * kStride;     // [stage][K, V][kTileKeys][kStride]

  int seq = 0;
  int tile = 0;
  if (!find_tile(a, geo.tok_per_tile, blockIdx.x, &seq, &tile)) return;
  const TileRange tr0 = tile_range(a, seq, tile, geo.tok_per_tile);
  // Key tiles of kTileKeys (tile_range counts kTileK = 64).
  const int kt_begin = tr0.kt_begin;
  const int n_kt = (tr0.key_hi - kt_begin + kTileKeys - 1) / kTileKeys;
  const int group = a.q_heads / a.kv_heads;
  const int kv_head = blockIdx.y / geo.groups;
  const int head0 = kv_head * group + (blockIdx.y % geo.groups) * geo.pack;
  const int split = blockIdx.z;
  int per = tr0.n_kt;
  int used = 1;
  if (geo.max_splits > 1) used = tile_splits(tr0.n_kt, geo.max_splits, &per);
  if (split >= used) return;
  // Splits cut at 64-key boundaries (the combine pass recomputes them in those units).
  const int kt_first = kt_begin + split * per * kTileK;
  const int kt_end = min(kt_begin + (split + 1) * per * kTileK, kt_begin + n_kt * kTileKeys);
  const int kt_count = (kt_end - kt_first + kTileKeys - 1) / kTileKeys;
  const int32_t* table = a.block_tables + seq * a.ld_block_tables;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;

  // Q tile into shared memory (zero rows past the tile's queries).
  {
    const bool vec = a.ld_q % 8 == 0 && (reinterpret_cast<uintptr_t>(a.q) & 15) == 0;
    for (int i = threadIdx.x; i < kRowsPerBlock * kChunks; i += kThreads) {
      int m = i / kChunks;
      int c = i % kChunks;
      int tok = m / geo.pack;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (tok < tr0.q_count) {
        const Bf16* src = a.q + static_cast<int64_t>(tr0.first_token + tok) * a.ld_q +
                          (head0 + m % geo.pack) * kHeadDim + c * 8;
        if (vec) {
          v = *reinterpret_cast<const uint4*>(src);
        } else {
          const uint32_t* s32 = reinterpret_cast<const uint32_t*>(src);
          v = make_uint4(s32[0], s32[1], s32[2], s32[3]);
        }
      }
      *reinterpret_cast<uint4*>(q_s + m * kStride + c * 8) = v;
    }
  }

  const int c = threadIdx.x % kChunks;
  const int key0 = threadIdx.x / kChunks;
  const uint32_t kv_base = smem_u32(kv_s);
  auto load_tile = [&](int stage, int kt) {
#pragma unroll
    for (int i = 0; i < kLoadPasses; ++i) {
      int key = key0 + i * kKeysPerPass;
      if (kKeysPerPass * kLoadPasses > kTileKeys && key >= kTileKeys) break;
      int j = kt + key;
      bool valid = j < tr0.key_hi;
      int64_t off = 0;
      if (valid) {
        int64_t slot =
            static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
        off = (slot * a.kv_heads + kv_head) * kHeadDim + c * 8;
      }
      uint32_t dst = kv_base + (stage * 2 * kTileElems + key * kStride + c * 8) * 2;
      cp_async16(dst, a.k_cache + off, valid);
      cp_async16(dst + kTileElems * 2, a.v_cache + off, valid);
    }
  };

  int row_tok[2][2];
  int qpos[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int m = warp * 32 + mt * 16 + g + 8 * r;
      row_tok[mt][r] = m / geo.pack;
      qpos[mt][r] = tr0.pos0 + row_tok[mt][r];
    }
  }

  float o[2][kDimTiles][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d)
      o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
  }
  float m_raw[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
  float l[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  const float scale2 = a.scale * kLog2e;
  const bool softcap = a.softcap > 0.0f;
  const float cap_in = softcap ? a.scale / a.softcap : 0.0f;
  const float cap_out = softcap ? a.softcap / a.scale : 0.0f;
  const int q_last = tr0.pos0 + tr0.q_count - 1;

  const uint32_t q_lane =
      smem_u32(q_s) +
      ((warp * 32 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kStride + (lane >> 4) * 8) * 2;
  const uint32_t k_lane = ((((lane >> 4) * 8) + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8) * 2;
  const uint32_t v_lane = (((((lane >> 3) & 1) * 8) + (lane & 7)) * kStride + (lane >> 4) * 8) * 2;

  load_tile(0, kt_first);
  cp_async_commit();
  for (int it = 0; it < kt_count; ++it) {
    const int kt = kt_first + it * kTileKeys;
    if (it + 1 < kt_count) {
      load_tile((it + 1) & 1, kt + kTileKeys);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t k_tile = kv_base + (it & 1) * 2 * kTileElems * 2;
    const uint32_t v_tile = k_tile + kTileElems * 2;

    float s[2][kKeyTiles][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      uint32_t qa[2][4];
      ldsm_x4(qa[0], q_lane + ks * 32);
      ldsm_x4(qa[1], q_lane + (16 * kStride + ks * 16) * 2);
#pragma unroll
      for (int np = 0; np < kKeyTiles / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_tile + k_lane + (np * 16 * kStride + ks * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(s[mt][2 * np], qa[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
        }
      }
    }
    const bool full =
        kt + kTileKeys - 1 <= tr0.pos0 && (a.sliding_window <= 0 || kt > q_last - a.sliding_window);
    uint32_t pf[2][kTileKeys / 16][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if (softcap) {
#pragma unroll
        for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = cap_out * tanhf(s[mt][nt][e] * cap_in);
        }
      }
      if (!full) {
#pragma unroll
        for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int r = e >> 1;
            int j = kt + nt * 8 + 2 * t + (e & 1);
            bool visible =
                j <= qpos[mt][r] && (a.sliding_window <= 0 || j > qpos[mt][r] - a.sliding_window);
            if (!visible) s[mt][nt][e] = -INFINITY;
          }
        }
      }
      float mx[2] = {m_raw[mt][0], m_raw[mt][1]};
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        mx[0] = fmaxf(mx[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
      float ms[2];
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
        ms[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * scale2;
        corr[r] = fast_exp2(fmaf(m_raw[mt][r], scale2, -ms[r]));
        m_raw[mt][r] = mx[r];
        l[mt][r] *= corr[r];
      }
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        float p0 = fast_exp2(fmaf(s[mt][nt][0], scale2, -ms[0]));
        float p1 = fast_exp2(fmaf(s[mt][nt][1], scale2, -ms[0]));
        float p2 = fast_exp2(fmaf(s[mt][nt][2], scale2, -ms[1]));
        float p3 = fast_exp2(fmaf(s[mt][nt][3], scale2, -ms[1]));
        l[mt][0] += p0 + p1;
        l[mt][1] += p2 + p3;
        pf[mt][nt / 2][(nt & 1) * 2 + 0] = pack_bf16(p0, p1);
        pf[mt][nt / 2][(nt & 1) * 2 + 1] = pack_bf16(p2, p3);
      }
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o[mt][d][0] *= corr[0];
        o[mt][d][1] *= corr[0];
        o[mt][d][2] *= corr[1];
        o[mt][d][3] *= corr[1];
      }
    }
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kHeadDim / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, v_tile + v_lane + (kk * 16 * kStride + dp * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(o[mt][2 * dp], pf[mt][kk], b[0], b[1]);
          mma_bf16(o[mt][2 * dp + 1], pf[mt][kk], b[2], b[3]);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(kFullMask, lr, 1);
      lr += __shfl_xor_sync(kFullMask, lr, 2);
      if (row_tok[mt][r] >= tr0.q_count) continue;
      const int m = warp * 32 + mt * 16 + g + 8 * r;
      const int head = head0 + m % geo.pack;
      const int token = tr0.first_token + row_tok[mt][r];
      const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
      if (used == 1) {
        Bf16* dst = a.out + static_cast<int64_t>(token) * a.ld_out + head * kHeadDim + 2 * t;
#pragma unroll
        for (int d = 0; d < kDimTiles; ++d) {
          *reinterpret_cast<__nv_bfloat162*>(dst + d * 8) =
              __floats2bfloat162_rn(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
        }
      } else {
        const int64_t idx = (static_cast<int64_t>(split) * a.tokens + token) * a.q_heads + head;
        float* dst = part_o + idx * kHeadDim + 2 * t;
#pragma unroll
        for (int d = 0; d < kDimTiles; ++d) {
          *reinterpret_cast<float2*>(dst + d * 8) =
              make_float2(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
        }
        if (t == 0) {
          part_ml[2 * idx] = lr > 0.0f ? m_raw[mt][r] * scale2 : -INFINITY;
          part_ml[2 * idx + 1] = lr;
        }
      }
    }
  }
}

// v4: v3 with kStages shared-memory stages and one barrier per tile, the output rescale
// skipped when no row max of the warp moved, and (kSwap) head groups on grid x so the
// longest tiles of every head start first.
template <int kHeadDim, int kTileKeys, int kStages, bool kSwap>
__global__ void __launch_bounds__(128, 2)
    attention_v4_kernel(PagedAttentionArgs a, Geometry geo, float* part_o, float* part_ml) {
  constexpr int kThreads = 128;
  constexpr int kRowsPerBlock = 128;
  constexpr int kStride = kHeadDim + 8;
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kSteps = kHeadDim / 16;
  constexpr int kDimTiles = kHeadDim / 8;
  constexpr int kKeyTiles = kTileKeys / 8;
  constexpr int kTileElems = kTileKeys * kStride;
  constexpr int kKeysPerPass = kThreads / kChunks;
  constexpr int kLoadPasses = (kTileKeys + kKeysPerPass - 1) / kKeysPerPass;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Bf16* q_s = reinterpret_cast<Bf16*>(smem_raw);  // [128][kStride]
  Bf16* kv_s = q_s + kRowsPerBlock * kStride;     // [stage][K, V][kTileKeys][kStride]

  int seq = 0;
  int tile = 0;
  const int col = kSwap ? blockIdx.y : blockIdx.x;
  const int head_group = kSwap ? blockIdx.x : blockIdx.y;
  if (!find_tile(a, geo.tok_per_tile, col, &seq, &tile)) return;
  const TileRange tr0 = tile_range(a, seq, tile, geo.tok_per_tile);
  // Key tiles of kTileKeys (tile_range counts kTileK = 64).
  const int kt_begin = tr0.kt_begin;
  const int n_kt = (tr0.key_hi - kt_begin + kTileKeys - 1) / kTileKeys;
  const int group = a.q_heads / a.kv_heads;
  const int kv_head = head_group / geo.groups;
  const int head0 = kv_head * group + (head_group % geo.groups) * geo.pack;
  const int split = blockIdx.z;
  int per = tr0.n_kt;
  int used = 1;
  if (geo.max_splits > 1) used = tile_splits(tr0.n_kt, geo.max_splits, &per);
  if (split >= used) return;
  // Splits cut at 64-key boundaries (the combine pass recomputes them in those units).
  const int kt_first = kt_begin + split * per * kTileK;
  const int kt_end = min(kt_begin + (split + 1) * per * kTileK, kt_begin + n_kt * kTileKeys);
  const int kt_count = (kt_end - kt_first + kTileKeys - 1) / kTileKeys;
  const int32_t* table = a.block_tables + seq * a.ld_block_tables;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;

  // Q tile into shared memory (zero rows past the tile's queries).
  {
    const bool vec = a.ld_q % 8 == 0 && (reinterpret_cast<uintptr_t>(a.q) & 15) == 0;
    for (int i = threadIdx.x; i < kRowsPerBlock * kChunks; i += kThreads) {
      int m = i / kChunks;
      int c = i % kChunks;
      int tok = m / geo.pack;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (tok < tr0.q_count) {
        const Bf16* src = a.q + static_cast<int64_t>(tr0.first_token + tok) * a.ld_q +
                          (head0 + m % geo.pack) * kHeadDim + c * 8;
        if (vec) {
          v = *reinterpret_cast<const uint4*>(src);
        } else {
          const uint32_t* s32 = reinterpret_cast<const uint32_t*>(src);
          v = make_uint4(s32[0], s32[1], s32[2], s32[3]);
        }
      }
      *reinterpret_cast<uint4*>(q_s + m * kStride + c * 8) = v;
    }
  }

  const int c = threadIdx.x % kChunks;
  const int key0 = threadIdx.x / kChunks;
  const uint32_t kv_base = smem_u32(kv_s);
  // Power-of-two block sizes (the usual case) index the table by shift and mask.
  const int bs_shift = (a.block_size & (a.block_size - 1)) == 0 ? __ffs(a.block_size) - 1 : -1;
  const int64_t slot_stride = static_cast<int64_t>(a.kv_heads) * kHeadDim;
  const int64_t head_off = static_cast<int64_t>(kv_head) * kHeadDim + c * 8;
  auto load_tile = [&](int stage, int kt) {
#pragma unroll
    for (int i = 0; i < kLoadPasses; ++i) {
      int key = key0 + i * kKeysPerPass;
      if (kKeysPerPass * kLoadPasses > kTileKeys && key >= kTileKeys) break;
      int j = kt + key;
      bool valid = j < tr0.key_hi;
      int64_t off = 0;
      if (valid) {
        int block;
        int within;
        if (bs_shift >= 0) {
          block = table[j >> bs_shift];
          within = j & (a.block_size - 1);
        } else {
          block = table[j / a.block_size];
          within = j % a.block_size;
        }
        off = (static_cast<int64_t>(block) * a.block_size + within) * slot_stride + head_off;
      }
      uint32_t dst = kv_base + (stage * 2 * kTileElems + key * kStride + c * 8) * 2;
      cp_async16(dst, a.k_cache + off, valid);
      cp_async16(dst + kTileElems * 2, a.v_cache + off, valid);
    }
  };

  int row_tok[2][2];
  int qpos[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int m = warp * 32 + mt * 16 + g + 8 * r;
      row_tok[mt][r] = m / geo.pack;
      qpos[mt][r] = tr0.pos0 + row_tok[mt][r];
    }
  }

  float o[2][kDimTiles][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d)
      o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
  }
  float m_raw[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
  float l[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  const float scale2 = a.scale * kLog2e;
  const bool softcap = a.softcap > 0.0f;
  const float cap_in = softcap ? a.scale / a.softcap : 0.0f;
  const float cap_out = softcap ? a.softcap / a.scale : 0.0f;
  const int q_last = tr0.pos0 + tr0.q_count - 1;

  const uint32_t q_lane =
      smem_u32(q_s) +
      ((warp * 32 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kStride + (lane >> 4) * 8) * 2;
  const uint32_t k_lane = ((((lane >> 4) * 8) + (lane & 7)) * kStride + ((lane >> 3) & 1) * 8) * 2;
  const uint32_t v_lane = (((((lane >> 3) & 1) * 8) + (lane & 7)) * kStride + (lane >> 4) * 8) * 2;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < kt_count) load_tile(st, kt_first + st * kTileKeys);
    cp_async_commit();  // empty groups keep the count uniform
  }
  for (int it = 0; it < kt_count; ++it) {
    const int kt = kt_first + it * kTileKeys;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile it landed for all threads; stage (it - 1) % kStages is free
    if (it + kStages - 1 < kt_count) {
      load_tile((it + kStages - 1) % kStages, kt + (kStages - 1) * kTileKeys);
    }
    cp_async_commit();
    const uint32_t k_tile = kv_base + (it % kStages) * 2 * kTileElems * 2;
    const uint32_t v_tile = k_tile + kTileElems * 2;

    float s[2][kKeyTiles][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      uint32_t qa[2][4];
      ldsm_x4(qa[0], q_lane + ks * 32);
      ldsm_x4(qa[1], q_lane + (16 * kStride + ks * 16) * 2);
#pragma unroll
      for (int np = 0; np < kKeyTiles / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_tile + k_lane + (np * 16 * kStride + ks * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(s[mt][2 * np], qa[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
        }
      }
    }
    const bool full =
        kt + kTileKeys - 1 <= tr0.pos0 && (a.sliding_window <= 0 || kt > q_last - a.sliding_window);
    uint32_t pf[2][kTileKeys / 16][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if (softcap) {
#pragma unroll
        for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = cap_out * tanhf(s[mt][nt][e] * cap_in);
        }
      }
      if (!full) {
#pragma unroll
        for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int r = e >> 1;
            int j = kt + nt * 8 + 2 * t + (e & 1);
            bool visible =
                j <= qpos[mt][r] && (a.sliding_window <= 0 || j > qpos[mt][r] - a.sliding_window);
            if (!visible) s[mt][nt][e] = -INFINITY;
          }
        }
      }
      float mx[2] = {m_raw[mt][0], m_raw[mt][1]};
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        mx[0] = fmaxf(mx[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
      float ms[2];
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
        ms[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * scale2;
        corr[r] = fast_exp2(fmaf(m_raw[mt][r], scale2, -ms[r]));
        m_raw[mt][r] = mx[r];
        l[mt][r] *= corr[r];
      }
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        float p0 = fast_exp2(fmaf(s[mt][nt][0], scale2, -ms[0]));
        float p1 = fast_exp2(fmaf(s[mt][nt][1], scale2, -ms[0]));
        float p2 = fast_exp2(fmaf(s[mt][nt][2], scale2, -ms[1]));
        float p3 = fast_exp2(fmaf(s[mt][nt][3], scale2, -ms[1]));
        l[mt][0] += p0 + p1;
        l[mt][1] += p2 + p3;
        pf[mt][nt / 2][(nt & 1) * 2 + 0] = pack_bf16(p0, p1);
        pf[mt][nt / 2][(nt & 1) * 2 + 1] = pack_bf16(p2, p3);
      }
      if (__any_sync(kFullMask, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
        for (int d = 0; d < kDimTiles; ++d) {
          o[mt][d][0] *= corr[0];
          o[mt][d][1] *= corr[0];
          o[mt][d][2] *= corr[1];
          o[mt][d][3] *= corr[1];
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kHeadDim / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, v_tile + v_lane + (kk * 16 * kStride + dp * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(o[mt][2 * dp], pf[mt][kk], b[0], b[1]);
          mma_bf16(o[mt][2 * dp + 1], pf[mt][kk], b[2], b[3]);
        }
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(kFullMask, lr, 1);
      lr += __shfl_xor_sync(kFullMask, lr, 2);
      if (row_tok[mt][r] >= tr0.q_count) continue;
      const int m = warp * 32 + mt * 16 + g + 8 * r;
      const int head = head0 + m % geo.pack;
      const int token = tr0.first_token + row_tok[mt][r];
      const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
      if (used == 1) {
        Bf16* dst = a.out + static_cast<int64_t>(token) * a.ld_out + head * kHeadDim + 2 * t;
#pragma unroll
        for (int d = 0; d < kDimTiles; ++d) {
          *reinterpret_cast<__nv_bfloat162*>(dst + d * 8) =
              __floats2bfloat162_rn(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
        }
      } else {
        const int64_t idx = (static_cast<int64_t>(split) * a.tokens + token) * a.q_heads + head;
        float* dst = part_o + idx * kHeadDim + 2 * t;
#pragma unroll
        for (int d = 0; d < kDimTiles; ++d) {
          *reinterpret_cast<float2*>(dst + d * 8) =
              make_float2(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
        }
        if (t == 0) {
          part_ml[2 * idx] = lr > 0.0f ? m_raw[mt][r] * scale2 : -INFINITY;
          part_ml[2 * idx + 1] = lr;
        }
      }
    }
  }
}

// Merges the key-range splits of one (token, head) row: weights l_s 2^(m_s - max m).
__global__ void combine_kernel(PagedAttentionArgs a, Geometry geo, const float* part_o,
                               const float* part_ml) {
  const int token = blockIdx.x;
  const int h = blockIdx.y;
  int seq = 0;
  while (seq + 1 < a.seqs && a.query_start[seq + 1] <= token) ++seq;
  const int q_len = a.query_start[seq + 1] - a.query_start[seq];
  if (q_len < detail::kTiledMinQueries) return;
  const int tile = (token - a.query_start[seq]) / geo.tok_per_tile;
  const TileRange tr = tile_range(a, seq, tile, geo.tok_per_tile);
  int per = 0;
  const int used = tile_splits(tr.n_kt, geo.max_splits, &per);
  if (used == 1) return;
  const int64_t stride = static_cast<int64_t>(a.tokens) * a.q_heads;
  const int64_t base = static_cast<int64_t>(token) * a.q_heads + h;
  float big_m = -INFINITY;
  for (int s = 0; s < used; ++s) {
    if (part_ml[2 * (s * stride + base) + 1] > 0.0f) {
      big_m = fmaxf(big_m, part_ml[2 * (s * stride + base)]);
    }
  }
  float total = 0.0f;
  for (int s = 0; s < used; ++s) {
    float l = part_ml[2 * (s * stride + base) + 1];
    if (l > 0.0f) total += l * exp2f(part_ml[2 * (s * stride + base)] - big_m);
  }
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < used; ++s) {
      float l = part_ml[2 * (s * stride + base) + 1];
      if (l > 0.0f) {
        o += l * exp2f(part_ml[2 * (s * stride + base)] - big_m) *
             part_o[(s * stride + base) * a.head_dim + i];
      }
    }
    a.out[static_cast<int64_t>(token) * a.ld_out + h * a.head_dim + i] =
        __float2bfloat16(o * inv_total);
  }
}

// kKind: 4 or 8 = v2 with that many warps; 32 or 64 = v3 with that many keys per tile.
template <int kHeadDim, int kKind>
cudaError_t launch_dim(const PagedAttentionArgs& a, size_t ws_bytes, cudaStream_t stream) {
  constexpr bool kV5 = kKind >= 200;
  constexpr bool kV3 = kKind >= 32 && !kV5;
  constexpr int kRows = kV3 || kV5 ? 128 : 16 * kKind;
  constexpr int kBlocksPerSm = kV3 ? 2 : kV5 ? 1 : 8 / kKind;
  const int group = a.q_heads / a.kv_heads;
  Geometry geo;
  geo.pack = 1;
  while (geo.pack < 8 && group % (geo.pack * 2) == 0) geo.pack *= 2;
  geo.tok_per_tile = kRows / geo.pack;
  geo.groups = group / geo.pack;
  geo.max_splits = 1;
  int sms = 0;
  cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  if (err != cudaSuccess) return err;
  const int64_t heads = static_cast<int64_t>(a.kv_heads) * geo.groups;
  const int64_t ctas = std::max<int64_t>(1, a.tokens / geo.tok_per_tile) * heads;
  const int64_t want = static_cast<int64_t>(sms) * kBlocksPerSm;
  const size_t per_split = static_cast<size_t>(a.tokens) * a.q_heads * (kHeadDim + 2) * 4;
  if (ctas < want && a.workspace != nullptr && per_split > 0) {
    int64_t cap = static_cast<int64_t>(ws_bytes / per_split);
    geo.max_splits = static_cast<int>(
        std::min<int64_t>({(want + ctas - 1) / ctas, cap, static_cast<int64_t>(kMaxSplits)}));
    geo.max_splits = std::max(geo.max_splits, 1);
  }
  float* part_o = a.workspace;
  float* part_ml = a.workspace == nullptr ? nullptr
                                          : a.workspace + static_cast<int64_t>(geo.max_splits) *
                                                              a.tokens * a.q_heads * kHeadDim;
  dim3 grid(a.tokens / geo.tok_per_tile + a.seqs, heads, geo.max_splits);
  if constexpr (kKind >= 200) {  // v5, 8 warps, 3 stages: 200 = grid as v2, 201 = swapped
    constexpr bool kSwap = kKind == 201;
    const size_t smem = 3 * 2 * kTileK * (kHeadDim + 8) * sizeof(Bf16);
    auto kernel = attention_v5_kernel<kHeadDim, 8, 3, kSwap>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err != cudaSuccess) return err;
    dim3 g = kSwap ? dim3(grid.y, grid.x, grid.z) : grid;
    kernel<<<g, 256, smem, stream>>>(a, geo, part_o, part_ml);
  } else if constexpr (kKind >= 100) {
    // v4: 101 = 32 keys x 3 stages, 102 = the same + swapped grid, 103 = 64 keys x 2 stages +
    // swapped grid.
    constexpr bool kSwap = kKind != 101;
    constexpr int kKeys = kKind == 103 ? 64 : 32;
    constexpr int kSt = kKind == 103 ? 2 : 3;
    const size_t smem = (128 + kSt * 2 * kKeys) * (kHeadDim + 8) * sizeof(Bf16);
    auto kernel = attention_v4_kernel<kHeadDim, kKeys, kSt, kSwap>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err != cudaSuccess) return err;
    dim3 g = kSwap ? dim3(grid.y, grid.x, grid.z) : grid;
    kernel<<<g, 128, smem, stream>>>(a, geo, part_o, part_ml);
  } else if constexpr (kV3) {
    const size_t smem = (128 + 2 * 2 * kKind) * (kHeadDim + 8) * sizeof(Bf16);
    auto kernel = attention_v3_kernel<kHeadDim, kKind>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err != cudaSuccess) return err;
    kernel<<<grid, 128, smem, stream>>>(a, geo, part_o, part_ml);
  } else {
    const size_t smem = 2 * 2 * kTileK * (kHeadDim + 8) * sizeof(Bf16);
    auto kernel = attention_v2_kernel<kHeadDim, kKind>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem));
    if (err != cudaSuccess) return err;
    kernel<<<grid, kKind * 32, smem, stream>>>(a, geo, part_o, part_ml);
  }
  if (geo.max_splits > 1) {
    combine_kernel<<<dim3(a.tokens, a.q_heads), 128, 0, stream>>>(a, geo, part_o, part_ml);
  }
  return cudaGetLastError();
}

template <int kKind>
cudaError_t launch(const PagedAttentionArgs& a, size_t ws_bytes, cudaStream_t stream) {
  switch (a.head_dim) {
    case 16:
      return launch_dim<16, kKind>(a, ws_bytes, stream);
    case 32:
      return launch_dim<32, kKind>(a, ws_bytes, stream);
    case 64:
      return launch_dim<64, kKind>(a, ws_bytes, stream);
    case 128:
      return launch_dim<128, kKind>(a, ws_bytes, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace v2

// ---------------------------------------------------------------------------------------
// Reference: one block per (token, head), f32 scores in shared memory.
__global__ void reference_kernel(PagedAttentionArgs a, const int32_t* token_list, float* out) {
  extern __shared__ float ref_smem[];  // [head_dim] q, then the scores
  __shared__ float scratch[32];
  const int token = token_list[blockIdx.x];
  const int h = blockIdx.y;
  int seq = 0;
  while (seq + 1 < a.seqs && a.query_start[seq + 1] <= token) ++seq;
  const int q_len = a.query_start[seq + 1] - a.query_start[seq];
  const int pos = a.kv_lens[seq] - q_len + (token - a.query_start[seq]);
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int hi = pos + 1;
  const int kv_head = h / (a.q_heads / a.kv_heads);
  const int32_t* table = a.block_tables + seq * a.ld_block_tables;
  float* q_s = ref_smem;
  float* sc = ref_smem + a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    q_s[d] = __bfloat162float(a.q[static_cast<int64_t>(token) * a.ld_q + h * a.head_dim + d]);
  }
  __syncthreads();
  auto row = [&](const Bf16* cache, int j) {
    int64_t slot = static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
    return cache + (slot * a.kv_heads + kv_head) * a.head_dim;
  };
  float mx = -INFINITY;
  for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    const Bf16* k = row(a.k_cache, j);
    float dot = 0.0f;
    for (int d = 0; d < a.head_dim; ++d) dot += q_s[d] * __bfloat162float(k[d]);
    dot *= a.scale;
    if (a.softcap > 0.0f) dot = a.softcap * tanhf(dot / a.softcap);
    sc[j - lo] = dot;
    mx = fmaxf(mx, dot);
  }
  mx = detail::block_max(mx, scratch);
  float sum = 0.0f;
  for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    float p = expf(sc[j - lo] - mx);
    sc[j - lo] = p;
    sum += p;
  }
  sum = detail::block_sum(sum, scratch);
  __syncthreads();
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = lo; j < hi; ++j) acc += sc[j - lo] * __bfloat162float(row(a.v_cache, j)[d]);
    out[(static_cast<int64_t>(token) * a.q_heads + h) * a.head_dim + d] = acc / sum;
  }
}

// ---------------------------------------------------------------------------------------
struct Case {
  std::string name;
  std::vector<std::pair<int, int>> seqs;  // {new query tokens, cached keys before them}
  int head_dim = 128;
  int q_heads = 32;
  int kv_heads = 8;
  int window = 0;
  float softcap = 0.0f;
  bool timed = false;
  int copies = 1;  // disjoint caches rotated per timed call (defeat the L2)
};

struct Variant {
  std::string name;
  int kind;  // 0: src; 1/2: v2 with 4/8 warps; 3/4: v3 with 32/64-key tiles; 5/6/9: v4; 7/8: v5
};

class Lab {
 public:
  explicit Lab(DeviceContext& ctx) : ctx_(ctx) {}

  DeviceBuffer raw(size_t bytes) {
    auto buf = ctx_.allocate(bytes + 16, "lab");
    check(buf.status(), "allocate");
    return std::move(buf).value();
  }
  template <typename T>
  DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer buf = raw(v.size() * sizeof(T));
    CK(cudaMemcpy(buf.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return buf;
  }

  void run(const Case& c, const std::vector<Variant>& variants, double gemm_rate) {
    cudaStream_t st = ctx_.stream();
    const int block_size = 16;
    const int num_seqs = static_cast<int>(c.seqs.size());
    std::vector<int32_t> query_start(num_seqs + 1, 0);
    std::vector<int32_t> kv_lens(num_seqs);
    int max_blocks = 0;
    int max_kv = 0;
    double visible = 0.0;  // Σ over tiled queries of visible keys
    for (int s = 0; s < num_seqs; ++s) {
      query_start[s + 1] = query_start[s] + c.seqs[s].first;
      kv_lens[s] = c.seqs[s].first + c.seqs[s].second;
      max_kv = std::max(max_kv, kv_lens[s]);
      max_blocks = std::max(max_blocks, (kv_lens[s] + block_size - 1) / block_size);
      if (c.seqs[s].first >= detail::kTiledMinQueries) {
        for (int i = 0; i < c.seqs[s].first; ++i) {
          int pos = c.seqs[s].second + i;
          int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
          visible += pos + 1 - lo;
        }
      }
    }
    const int tokens = query_start[num_seqs];
    int per_copy = 0;
    for (int s = 0; s < num_seqs; ++s) per_copy += (kv_lens[s] + block_size - 1) / block_size;
    const int total_blocks = per_copy * c.copies + 5;
    std::vector<int32_t> pool(total_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937 rng(7);
    std::shuffle(pool.begin(), pool.end(), rng);
    const int64_t ld_table = max_blocks + 3;
    std::vector<DeviceBuffer> tables;
    int next = 0;
    for (int copy = 0; copy < c.copies; ++copy) {
      std::vector<int32_t> tab(num_seqs * ld_table, -1);
      for (int s = 0; s < num_seqs; ++s) {
        int blocks = (kv_lens[s] + block_size - 1) / block_size;
        for (int b = 0; b < blocks; ++b) tab[s * ld_table + b] = pool[next++];
      }
      tables.push_back(upload(tab));
    }
    const int64_t row = static_cast<int64_t>(c.q_heads) * c.head_dim;
    const int64_t ld_q = row + 3 * c.head_dim;  // q inside a wider qkv row
    const int64_t ld_out = row + 8;
    const size_t cache_elems = size_t(total_blocks) * block_size * c.kv_heads * c.head_dim;
    DeviceBuffer q = raw(size_t(tokens) * ld_q * 2);
    DeviceBuffer k = raw(cache_elems * 2);
    DeviceBuffer v = raw(cache_elems * 2);
    CK(fill_random_bf16(q.as<Bf16>(), size_t(tokens) * ld_q, 11, 2.0f, st));
    CK(fill_random_bf16(k.as<Bf16>(), cache_elems, 12, 1.0f, st));
    CK(fill_random_bf16(v.as<Bf16>(), cache_elems, 13, 1.0f, st));
    DeviceBuffer qs = upload(query_start);
    DeviceBuffer kl = upload(kv_lens);
    DeviceBuffer out = raw(size_t(tokens) * ld_out * 2);
    DeviceBuffer ref = raw(size_t(tokens) * row * 4);
    const size_t ws_bytes =
        std::min<size_t>(size_t(64) * tokens * c.q_heads * (c.head_dim + 2) * 4, size_t{512} << 20);
    DeviceBuffer ws = raw(ws_bytes);

    PagedAttentionArgs a;
    a.q = q.as<Bf16>();
    a.ld_q = ld_q;
    a.k_cache = k.as<Bf16>();
    a.v_cache = v.as<Bf16>();
    a.block_tables = tables[0].as<int32_t>();
    a.ld_block_tables = ld_table;
    a.query_start = qs.as<int32_t>();
    a.kv_lens = kl.as<int32_t>();
    a.out = out.as<Bf16>();
    a.ld_out = ld_out;
    a.seqs = num_seqs;
    a.tokens = tokens;
    a.q_heads = c.q_heads;
    a.kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.block_size = block_size;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.softcap = c.softcap;
    a.sliding_window = c.window;
    a.workspace = ws.as<float>();
    // The src path sizes its splits by paged_attention_workspace_bytes(.., num_splits).
    a.num_splits = static_cast<int>(
        std::clamp<size_t>(ws_bytes / (size_t(tokens) * c.q_heads * (c.head_dim + 2) * 4), 1, 64));

    size_t ref_smem = (c.head_dim + max_kv + 8) * sizeof(float);
    CK(cudaFuncSetAttribute(reference_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(ref_smem)));
    // The reference checks every token of small cases; of large ones the first and last 64
    // of each sequence and every 13th between (it is slow: O(keys) per thread).
    std::vector<int32_t> checked;
    for (int s = 0; s < num_seqs; ++s) {
      for (int tk = query_start[s]; tk < query_start[s + 1]; ++tk) {
        int i = tk - query_start[s];
        if (!c.timed || i < 64 || query_start[s + 1] - tk <= 64 || i % 13 == 0)
          checked.push_back(tk);
      }
    }
    DeviceBuffer dchecked = upload(checked);
    reference_kernel<<<dim3(checked.size(), c.q_heads), 256, ref_smem, st>>>(
        a, dchecked.as<int32_t>(), ref.as<float>());
    CK(cudaGetLastError());
    std::vector<float> want(size_t(tokens) * row);
    CK(cudaMemcpyAsync(want.data(), ref.data(), want.size() * 4, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));

    for (const Variant& var : variants) {
      auto call = [&](int i) {
        a.block_tables = tables[i % c.copies].as<int32_t>();
        if (var.kind == 0) {
          CK(detail::paged_attention_tiled(a, st));
        } else if (var.kind == 1) {
          CK(v2::launch<4>(a, ws_bytes, st));
        } else if (var.kind == 2) {
          CK(v2::launch<8>(a, ws_bytes, st));
        } else if (var.kind == 3) {
          CK(v2::launch<32>(a, ws_bytes, st));
        } else if (var.kind == 4) {
          CK(v2::launch<64>(a, ws_bytes, st));
        } else if (var.kind == 5) {
          CK(v2::launch<101>(a, ws_bytes, st));
        } else if (var.kind == 6) {
          CK(v2::launch<102>(a, ws_bytes, st));
        } else if (var.kind == 9) {
          CK(v2::launch<103>(a, ws_bytes, st));
        } else if (var.kind == 7) {
          CK(v2::launch<200>(a, ws_bytes, st));
        } else {
          CK(v2::launch<201>(a, ws_bytes, st));
        }
      };
      CK(cudaMemsetAsync(out.data(), 0xff, size_t(tokens) * ld_out * 2, st));  // NaN poison
      call(0);
      std::vector<Bf16> got(size_t(tokens) * ld_out);
      CK(cudaMemcpyAsync(got.data(), out.data(), got.size() * 2, cudaMemcpyDeviceToHost, st));
      CK(cudaStreamSynchronize(st));
      double num = 0.0;
      double den = 0.0;
      double worst = 0.0;
      bool finite = true;
      for (int tk : checked) {
        int s = 0;
        while (s + 1 < num_seqs && query_start[s + 1] <= tk) ++s;
        if (c.seqs[s].first < detail::kTiledMinQueries) continue;
        {
          for (int64_t e = 0; e < row; ++e) {
            double x = __bfloat162float(got[tk * ld_out + e]);
            double w = want[tk * row + e];
            if (!std::isfinite(x)) finite = false;
            num += (x - w) * (x - w);
            den += w * w;
            worst = std::max(worst, std::abs(x - w));
          }
        }
      }
      double rel = std::sqrt(num / std::max(den, 1e-30));
      bool ok = finite && rel < 1e-2;
      std::printf("  %-28s %-14s rel_l2 %.2e max_abs %.2e %s", c.name.c_str(), var.name.c_str(),
                  rel, worst, ok ? "ok" : "MISMATCH");
      if (ok && c.timed) {
        double ms = median_ms(st, call, 10, 2);
        double flops = 4.0 * c.head_dim * c.q_heads * visible;
        double kv_bytes = 0.0;
        for (int s = 0; s < num_seqs; ++s)
          kv_bytes += 2.0 * kv_lens[s] * c.kv_heads * c.head_dim * 2;
        std::printf("  %8.1f us  %6.1f TFLOP/s (%4.1f%% of GEMM)  K/V %.1f MB", ms * 1e3,
                    flops / (ms * 1e-3) / 1e12, 100.0 * flops / (ms * 1e-3) / gemm_rate,
                    kv_bytes / 1e6);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }

 private:
  DeviceContext& ctx_;
};

double gemm_rate(DeviceContext& ctx) {
  const int n = 8192;
  GemmBf16 gemm(ctx);
  auto x = ctx.allocate(size_t(n) * n * 2, "lab");
  auto w = ctx.allocate(size_t(n) * n * 2, "lab");
  auto y = ctx.allocate(size_t(n) * n * 2, "lab");
  check(x.status(), "allocate");
  check(w.status(), "allocate");
  check(y.status(), "allocate");
  CK(fill_random_bf16(x->as<Bf16>(), size_t(n) * n, 1, 1.0f, ctx.stream()));
  CK(fill_random_bf16(w->as<Bf16>(), size_t(n) * n, 2, 1.0f, ctx.stream()));
  GemmShape s{n, n, n, n, n, n, GemmOut::kBf16, false};
  double ms = median_ms(ctx.stream(),
                        [&](int) { CK(gemm.run(s, x->as<Bf16>(), w->as<Bf16>(), y->data())); });
  double rate = 2.0 * n * n * double(n) / (ms * 1e-3);
  std::printf("GEMM bf16 8192^3: %.3f ms -> %.1f TFLOP/s\n", ms, rate / 1e12);
  return rate;
}

int run_lab() {
  auto ctx_or = DeviceContext::create({});
  check(ctx_or.status(), "device");
  DeviceContext& ctx = **ctx_or;
  const double rate = gemm_rate(ctx);
  measure_copy_bandwidth(ctx.stream());
  std::fflush(stdout);
  // src: the graduated v2 (8 warps x 16 rows, 64-key tiles); v1 (64x64 tiles, V transposed
  // through shared memory) measured 2421.5 us / 56.8 TFLOP/s at 4096 in W1.
  std::vector<Variant> variants = {{"src", 0},
                                   {"v3-32rows-k64", 4},
                                   {"v4-k32-3st-skip", 5},
                                   {"v4-k32-3st-swap", 6},
                                   {"v4-k64-2st-swap", 9},
                                   {"v5-8w-3st-skip", 7},
                                   {"v5-8w-3st-swap", 8}};
  std::vector<Case> cases;
  // Correctness only: varlen batches, GQA ratios, window, soft-capping, head sizes.
  cases.push_back(
      {"mixed hd128 32/8", {{37, 0}, {17, 100}, {1, 768}, {200, 5124}, {3, 29}, {64, 64}}});
  cases.push_back(
      {"mixed hd64 12/2 w300 cap30", {{100, 0}, {33, 700}, {2, 90}}, 64, 12, 2, 300, 30.0f});
  cases.push_back({"mixed hd32 8/2 w40 cap20", {{71, 10}, {16, 0}}, 32, 8, 2, 40, 20.0f});
  cases.push_back({"hd16 4/2", {{50, 20}}, 16, 4, 2});
  cases.push_back({"hd128 8/8 (no GQA)", {{130, 300}, {5, 5}}, 128, 8, 8});
  cases.push_back({"hd64 16/1 (MQA) w100", {{90, 1000}}, 64, 16, 1, 100});
  cases.push_back({"hd128 6/2 (group 3)", {{77, 40}}, 128, 6, 2});
  cases.push_back({"suffix 20 over 3000 w500", {{20, 3000}, {40, 0}}, 128, 32, 8, 500});
  // Timed: the 8B model's shapes.
  Case t;
  t.timed = true;
  t.name = "prefill 4096";
  t.seqs = {{4096, 0}};
  cases.push_back(t);
  t.name = "chunk 512 ctx 0";
  t.seqs = {{512, 0}};
  t.copies = 4;
  cases.push_back(t);
  t.name = "chunk 512 ctx 4096";
  t.seqs = {{512, 4096}};
  cases.push_back(t);
  t.name = "chunk 512 ctx 8192";
  t.seqs = {{512, 8192}};
  cases.push_back(t);
  t.name = "prefill 8192";
  t.seqs = {{8192, 0}};
  t.copies = 1;
  cases.push_back(t);
  t.name = "suffix 16 over 8160";
  t.seqs = {{16, 8160}};
  t.copies = 4;
  cases.push_back(t);
  Lab lab(ctx);
  for (const Case& c : cases) lab.run(c, variants, rate);
  return 0;
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  try {
    return hearth::cuda::dev::run_lab();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lab_prefill_attention: %s\n", e.what());
    return 1;
  }
}
