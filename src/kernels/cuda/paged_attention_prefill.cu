// Tiled prefill attention on tensor cores (flash-attention style). A block of 8 warps owns
// 128 query rows — (token, q head) pairs, the q heads of one GQA group packed side by side
// so each K/V tile is read once per group — 16 rows per warp with Q in registers. K/V tiles
// of 64 keys are gathered through the block table by cp.async into two shared-memory
// stages; K's B fragments come from ldmatrix, V's from ldmatrix.trans; mma.sync m16n8k16
// accumulates in f32; the online softmax runs in registers (exp2, scale folded in). Tiles of
// a sequence run longest first. When the grid alone would not fill the device, the key
// range is split and a combine pass merges the partial rows (workspace from paged_attention).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention_prefill.cuh"

namespace hearth::cuda::detail {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kTileK = 64;
constexpr int kMinTilesPerSplit = 2;
constexpr int kMaxSplits = 64;

struct Geometry {
  int pack;          // q heads of one kv head in a CTA's rows
  int tok_per_tile;  // query tokens per CTA (rows / pack)
  int groups;        // CTAs per kv head (group / pack)
  int max_splits;    // key-range splits; 1: no workspace used
  int min_q_len;     // sequences with fewer new tokens are left to the split-K kernel ...
  int max_q_len;     // ... and with more to another launch
  // Every sequence has one new token (a step of decode rows) and gets one tile: tile column
  // idx is sequence idx, no search (at 256 sequences the search cost a block ~3 us).
  bool one_token_each;
  // Batch-invariant (PagedAttentionArgs::batch_invariant): every sequence is tiled (min_q_len
  // 1) and split z covers the absolute keys [z * split_keys, (z + 1) * split_keys) of the
  // max_splits; a row of one split is written directly, a row of more is merged by the
  // combine kernel over its own splits in order. See invariant_row_splits.
  bool invariant;
  int split_keys;
};

// Batch-invariant: the first and last absolute split holding a row's visible keys.
__device__ __forceinline__ void invariant_row_splits(const PagedAttentionArgs& a,
                                                     const Geometry& geo, int pos, int* first,
                                                     int* last) {
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  *first = lo / geo.split_keys;
  *last = pos / geo.split_keys;
}

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
// Each warp scans 32 sequences per step (tile counts, prefix sum by shuffles), so a batch
// of many decode rows beside one prompt costs seqs / 32 steps per block, not seqs.
__device__ __forceinline__ bool find_tile(const PagedAttentionArgs& a, int tok_per_tile,
                                          int min_q_len, int max_q_len, int idx, int* seq,
                                          int* tile) {
  const int lane = threadIdx.x & 31;
  int before = 0;  // tiles of the sequences already scanned
  for (int s0 = 0; s0 < a.seqs; s0 += 32) {
    const int s = s0 + lane;
    int tiles = 0;
    if (s < a.seqs) {
      int q_len = a.query_start[s + 1] - a.query_start[s];
      if (q_len >= min_q_len && q_len <= max_q_len) {
        tiles = (q_len + tok_per_tile - 1) / tok_per_tile;
      }
    }
    int upto = tiles;  // inclusive prefix sum over the lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      int v = __shfl_up_sync(kFullMask, upto, o);
      if (lane >= o) upto += v;
    }
    const int total = __shfl_sync(kFullMask, upto, 31);
    if (idx < before + total) {
      const int owner = __ffs(__ballot_sync(kFullMask, before + upto > idx)) - 1;
      const int first = before + __shfl_sync(kFullMask, upto - tiles, owner);
      const int count = __shfl_sync(kFullMask, tiles, owner);
      *seq = s0 + owner;
      *tile = count - 1 - (idx - first);
      return true;
    }
    before += total;
  }
  return false;
}

// One block = kWarps x 16 (token, q head) rows of one tile x the keys of one split.
// kInvariant (geo.invariant) is a template parameter so the default path's instantiation is
// the code it was before batch invariance touched this kernel (a runtime choice between the
// two forms of `l *= corr` would keep the compiler from fusing that product into the add).
template <int kHeadDim, int kWarps, bool kInvariant>
__global__ void __launch_bounds__(kWarps * 32, 8 / kWarps)
    attention_tiled_kernel(PagedAttentionArgs a, Geometry geo, float* part_o, float* part_ml) {
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
  if (geo.one_token_each) {
    if (static_cast<int>(blockIdx.x) >= a.seqs) return;
    seq = blockIdx.x;
  } else if (!find_tile(a, geo.tok_per_tile, geo.min_q_len, geo.max_q_len, blockIdx.x, &seq,
                        &tile)) {
    return;
  }
  const TileRange tr = tile_range(a, seq, tile, geo.tok_per_tile);
  const int group = a.q_heads / a.kv_heads;
  const int kv_head = blockIdx.y / geo.groups;
  const int head0 = kv_head * group + (blockIdx.y % geo.groups) * geo.pack;
  const int split = blockIdx.z;
  int used = 1;
  int kt_first = tr.kt_begin;
  int kt_count = tr.n_kt;
  if constexpr (kInvariant) {
    // This split's absolute keys, clipped to the tile's (tiles stay 64-key aligned).
    const int64_t s_lo = static_cast<int64_t>(split) * geo.split_keys;
    kt_first = static_cast<int>(max(s_lo, static_cast<int64_t>(tr.kt_begin)));
    const int kt_end =
        static_cast<int>(min(s_lo + geo.split_keys, static_cast<int64_t>(tr.key_hi)));
    if (kt_first >= kt_end) return;
    kt_count = (kt_end - kt_first + kTileK - 1) / kTileK;
  } else if (geo.max_splits > 1) {
    int per = tr.n_kt;
    used = tile_splits(tr.n_kt, geo.max_splits, &per);
    if (split >= used) return;
    kt_first = tr.kt_begin + split * per * kTileK;
    kt_count = min(per, tr.n_kt - split * per);
  }
  const int32_t* table = a.block_tables + seq * a.ld_block_tables;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  // A warp whose rows are all past the tile's queries (a decode row's tile, a last partial
  // tile) only helps load the K/V tiles.
  const bool warp_active = (warp * 16) / geo.pack < tr.q_count;
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
    if (!warp_active) {
      __syncthreads();
      continue;
    }
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
      // Invariant: a tile that leaves the max where it was (one past this row's keys in a
      // longer tile among them) scales by exactly 1, not by 2^(rounding of m * scale2).
      corr[r] = kInvariant && mx[r] == m_raw[r] ? 1.0f : fast_exp2(fmaf(m_raw[r], scale2, -ms[r]));
      m_raw[r] = mx[r];
      // Invariant: a plain product, so no instantiation fuses it with the add below.
      if constexpr (kInvariant) {
        l[r] = __fmul_rn(l[r], corr[r]);
      } else {
        l[r] *= corr[r];
      }
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
    bool direct = used == 1;
    if constexpr (kInvariant) {
      int first = 0;
      int last = 0;
      invariant_row_splits(a, geo, qpos[r], &first, &last);
      if (split < first || split > last) continue;  // none of this row's keys
      direct = first == last;
    }
    if (direct) {
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

// Merges the key-range splits of one (token, head) row: weights l_s 2^(m_s - max m).
__global__ void combine_kernel(PagedAttentionArgs a, Geometry geo, const float* part_o,
                               const float* part_ml) {
  const int token = blockIdx.x;
  const int h = blockIdx.y;
  int seq = 0;  // the last sequence whose query_start <= token (binary search)
  int hi_seq = a.seqs - 1;
  while (seq < hi_seq) {
    int mid = (seq + hi_seq + 1) >> 1;
    if (a.query_start[mid] <= token) {
      seq = mid;
    } else {
      hi_seq = mid - 1;
    }
  }
  const int q_len = a.query_start[seq + 1] - a.query_start[seq];
  if (q_len < geo.min_q_len) return;
  int s_begin = 0;
  int used = 0;  // one past the last split
  if (geo.invariant) {
    const int pos = a.kv_lens[seq] - q_len + (token - a.query_start[seq]);
    int last = 0;
    invariant_row_splits(a, geo, pos, &s_begin, &last);
    if (s_begin == last) return;  // written by the tiled kernel
    used = last + 1;
  } else {
    const int tile = (token - a.query_start[seq]) / geo.tok_per_tile;
    const TileRange tr = tile_range(a, seq, tile, geo.tok_per_tile);
    int per = 0;
    used = tile_splits(tr.n_kt, geo.max_splits, &per);
    if (used == 1) return;
  }
  const int64_t stride = static_cast<int64_t>(a.tokens) * a.q_heads;
  const int64_t base = static_cast<int64_t>(token) * a.q_heads + h;
  float big_m = -INFINITY;
  for (int s = s_begin; s < used; ++s) {
    if (part_ml[2 * (s * stride + base) + 1] > 0.0f) {
      big_m = fmaxf(big_m, part_ml[2 * (s * stride + base)]);
    }
  }
  float total = 0.0f;
  for (int s = s_begin; s < used; ++s) {
    float l = part_ml[2 * (s * stride + base) + 1];
    if (l > 0.0f) total += l * exp2f(part_ml[2 * (s * stride + base)] - big_m);
  }
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
    float o = 0.0f;
    for (int s = s_begin; s < used; ++s) {
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

constexpr int kWarps = 8;           // 16 query rows each
constexpr int kRows = 16 * kWarps;  // (token, q head) rows per block
constexpr int kBlocksPerSm = 1;     // by registers (~223 per thread, 256 threads)
// Enough blocks for kBlocksPerSm per SM on devices of up to 152 SMs; the workspace is sized
// for it, the launch asks for what the device in use needs.
constexpr int kFillBlocks = 152 * kBlocksPerSm;
// Batch-invariant: sequences of under kTiledMinQueries new tokens (decode rows) run in blocks
// of this many warps, several a multiprocessor; a block of 8 would hold one decode row's 4-8
// rows in one warp beside 7 idle ones, one block a multiprocessor. The rows' sums are the
// same in either (the gtests compare a decode row with its place in a prompt's tile).
constexpr int kShortWarps = 4;

template <int kHeadDim>
size_t tile_smem_bytes() {
  return 2 * 2 * kTileK * (kHeadDim + 8) * sizeof(Bf16);
}

// One launch of the tiled kernel in blocks of W warps over the sequences geo selects.
template <int kHeadDim, int W, bool kInvariant>
cudaError_t launch_tiles(const PagedAttentionArgs& a, Geometry geo, int64_t heads, float* part_o,
                         float* part_ml, cudaStream_t stream) {
  const size_t smem = tile_smem_bytes<kHeadDim>();
  auto kernel = attention_tiled_kernel<kHeadDim, W, kInvariant>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  // Columns: an upper bound of the (sequence, tile) pairs (at most tokens / min_q_len
  // sequences are tiled, each with one partial tile); surplus blocks exit at once.
  const int64_t columns = a.tokens / geo.tok_per_tile + std::min(a.seqs, a.tokens / geo.min_q_len);
  if (heads > 65535) return cudaErrorInvalidValue;
  dim3 grid(static_cast<unsigned>(columns), static_cast<unsigned>(heads), geo.max_splits);
  kernel<<<grid, W * 32, smem, stream>>>(a, geo, part_o, part_ml);
  return cudaGetLastError();
}

template <int kHeadDim>
cudaError_t launch_dim(const PagedAttentionArgs& a, cudaStream_t stream) {
  const int group = a.q_heads / a.kv_heads;
  Geometry geo;
  geo.pack = 1;
  while (geo.pack < 8 && group % (geo.pack * 2) == 0) geo.pack *= 2;
  geo.tok_per_tile = kRows / geo.pack;
  geo.groups = group / geo.pack;
  geo.max_splits = 1;
  geo.min_q_len = kTiledMinQueries;
  geo.max_q_len = 1 << 30;
  geo.one_token_each = false;
  geo.invariant = a.batch_invariant;
  geo.split_keys = 0;
  const int64_t heads = static_cast<int64_t>(a.kv_heads) * geo.groups;
  const int64_t blocks = std::max<int64_t>(1, a.tokens / geo.tok_per_tile) * heads;
  const size_t per_split = static_cast<size_t>(a.tokens) * a.q_heads * (kHeadDim + 2) * 4;
  if (a.batch_invariant) {
    // The caller's invariant splits (paged_attention_invariant_splits); split_keys 0: one.
    geo.max_splits = a.num_splits;
    geo.split_keys = a.split_keys > 0 ? a.split_keys : 1 << 30;
  } else if (a.workspace != nullptr && blocks < kFillBlocks) {
    int device = 0;
    int sms = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    if (err != cudaSuccess) return err;
    const int64_t want = static_cast<int64_t>(sms) * kBlocksPerSm;
    const size_t capacity =
        paged_attention_workspace_bytes(a.tokens, a.q_heads, a.head_dim, a.num_splits);
    const int64_t fit = static_cast<int64_t>(capacity / per_split);
    geo.max_splits = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>({(want + blocks - 1) / blocks, fit, int64_t{kMaxSplits}})));
  }
  float* part_o = a.workspace;
  float* part_ml = a.workspace == nullptr ? nullptr
                                          : a.workspace + static_cast<int64_t>(geo.max_splits) *
                                                              a.tokens * a.q_heads * kHeadDim;
  // Prompt tiles (some sequence can have kTiledMinQueries new tokens only when the step has
  // tokens - (seqs - 1) of them).
  if (!a.batch_invariant) {
    cudaError_t err = launch_tiles<kHeadDim, kWarps, false>(a, geo, heads, part_o, part_ml, stream);
    if (err != cudaSuccess) return err;
  } else if (a.tokens - (a.seqs - 1) >= kTiledMinQueries) {
    cudaError_t err = launch_tiles<kHeadDim, kWarps, true>(a, geo, heads, part_o, part_ml, stream);
    if (err != cudaSuccess) return err;
  }
  if (a.batch_invariant) {  // decode rows and short prompts, in blocks of their own
    Geometry short_geo = geo;
    short_geo.tok_per_tile = 16 * kShortWarps / geo.pack;
    short_geo.min_q_len = 1;
    short_geo.max_q_len = kTiledMinQueries - 1;
    short_geo.one_token_each = a.tokens == a.seqs;
    cudaError_t err =
        launch_tiles<kHeadDim, kShortWarps, true>(a, short_geo, heads, part_o, part_ml, stream);
    if (err != cudaSuccess) return err;
    geo.min_q_len = 1;  // the combine kernel merges every sequence's rows
  }
  if (geo.max_splits > 1) {
    combine_kernel<<<dim3(a.tokens, a.q_heads), 128, 0, stream>>>(a, geo, part_o, part_ml);
  }
  return cudaGetLastError();
}

}  // namespace

bool paged_attention_tiled_supported(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

size_t paged_attention_tiled_workspace_bytes(int tokens, int q_heads, int head_dim) {
  if (tokens < kTiledMinQueries || !paged_attention_tiled_supported(head_dim)) return 0;
  const int64_t rows = static_cast<int64_t>(tokens) * q_heads;
  const int64_t blocks = (rows + kRows - 1) / kRows;
  if (blocks >= kFillBlocks) return 0;
  const int64_t splits = std::min<int64_t>(kMaxSplits, (kFillBlocks + blocks - 1) / blocks);
  return static_cast<size_t>(splits * rows) * (head_dim + 2) * sizeof(float);
}

cudaError_t paged_attention_tiled(const PagedAttentionArgs& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 16:
      return launch_dim<16>(a, stream);
    case 32:
      return launch_dim<32>(a, stream);
    case 64:
      return launch_dim<64>(a, stream);
    case 128:
      return launch_dim<128>(a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hearth::cuda::detail
