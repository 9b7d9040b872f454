// Tiled prefill attention on tensor cores. A block owns 64 query tokens of one sequence
// and one q head (4 warps x 16 queries); it walks the visible keys in tiles of 64, staged
// in shared memory (K row-major, V transposed so both feed mma.sync m16n8k16 with 32-bit
// loads and no bank conflicts), and keeps the softmax state per query row in registers.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention_prefill.cuh"

namespace hearth::cuda::detail {
namespace {

constexpr int kTileQ = 64;
constexpr int kTileK = 64;
constexpr int kThreads = 128;

__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) attention_tiled_kernel(PagedAttentionArgs a) {
  constexpr int kKStride = kHeadDim + 8;   // bf16 per K row in shared memory (padding)
  constexpr int kVStride = kTileK + 8;     // bf16 per transposed V row
  constexpr int kSteps = kHeadDim / 16;    // k-steps of q·k
  constexpr int kDimTiles = kHeadDim / 8;  // n-tiles of the output
  __shared__ __align__(16) __nv_bfloat16 k_s[kTileK * kKStride];
  __shared__ __align__(16) __nv_bfloat16 vt_s[kHeadDim * kVStride];

  // Which (sequence, 64-query tile) this block owns.
  int idx = blockIdx.x;
  int seq = -1;
  for (int s = 0; s < a.seqs; ++s) {
    int q_len = a.query_start[s + 1] - a.query_start[s];
    if (q_len < kTiledMinQueries) continue;
    int tiles = (q_len + kTileQ - 1) / kTileQ;
    if (idx < tiles) {
      seq = s;
      break;
    }
    idx -= tiles;
  }
  if (seq < 0) return;
  const int h = blockIdx.y;
  const int kv_head = h / (a.q_heads / a.kv_heads);
  const int q_len = a.query_start[seq + 1] - a.query_start[seq];
  const int kv_len = a.kv_lens[seq];
  const int tile_first = idx * kTileQ;  // within the sequence's new tokens
  const int q_count = min(kTileQ, q_len - tile_first);
  const int first_token = a.query_start[seq] + tile_first;
  const int pos0 = kv_len - q_len + tile_first;  // position of the tile's first query
  const int key_hi = pos0 + q_count;             // one past the last visible key
  int key_lo = 0;
  if (a.sliding_window > 0) key_lo = max(0, pos0 - a.sliding_window + 1);
  const int32_t* table = a.block_tables + seq * a.ld_block_tables;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;         // fragment row group
  const int t = lane & 3;          // thread in group
  const int row0 = warp * 16 + g;  // this thread's two query rows in the tile: row0, row0 + 8
  const int rows[2] = {row0, row0 + 8};
  const int qpos[2] = {pos0 + rows[0], pos0 + rows[1]};

  // Q fragments (A operand), zero for rows past the tile's queries.
  uint32_t qf[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      int row = rows[r & 1];
      int col = ks * 16 + 2 * t + (r >= 2 ? 8 : 0);
      qf[ks][r] = 0;
      if (row < q_count) {
        qf[ks][r] = *reinterpret_cast<const uint32_t*>(a.q + (first_token + row) * a.ld_q +
                                                       h * kHeadDim + col);
      }
    }
  }

  float o[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};  // this thread's partial row sums (reduced over the quad at the end)
  const float scale2 = a.scale * kLog2e;

  for (int kt = key_lo / kTileK * kTileK; kt < key_hi; kt += kTileK) {
    __syncthreads();  // the previous tile is no longer read
    constexpr int kChunks = kHeadDim / 8;
    for (int i = threadIdx.x; i < kTileK * kChunks; i += kThreads) {
      int key = i / kChunks;
      int c = i % kChunks;
      int j = kt + key;
      uint4 kv = make_uint4(0, 0, 0, 0);
      uint4 vv = make_uint4(0, 0, 0, 0);
      if (j < key_hi) {
        int64_t slot =
            static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size;
        int64_t off = (slot * a.kv_heads + kv_head) * kHeadDim + c * 8;
        kv = *reinterpret_cast<const uint4*>(a.k_cache + off);
        vv = *reinterpret_cast<const uint4*>(a.v_cache + off);
      }
      *reinterpret_cast<uint4*>(&k_s[key * kKStride + c * 8]) = kv;
      const __nv_bfloat16* vh = reinterpret_cast<const __nv_bfloat16*>(&vv);
#pragma unroll
      for (int e = 0; e < 8; ++e) vt_s[(c * 8 + e) * kVStride + key] = vh[e];
    }
    __syncthreads();

    // S = Q Kᵀ for 16 queries x 64 keys per warp.
    float s[kTileK / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        const __nv_bfloat16* kr = &k_s[(nt * 8 + g) * kKStride + ks * 16 + 2 * t];
        mma_bf16(s[nt], qf[ks], *reinterpret_cast<const uint32_t*>(kr),
                 *reinterpret_cast<const uint32_t*>(kr + 8));
      }
    }
    // Scale, soft-cap, mask (causal, window, tile tail), then the online softmax.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int r = e >> 1;
        int j = kt + nt * 8 + 2 * t + (e & 1);
        float x = s[nt][e];
        if (a.softcap > 0.0f) {
          x = a.softcap * tanhf(x * a.scale / a.softcap) * kLog2e;
        } else {
          x *= scale2;
        }
        bool visible =
            j <= qpos[r] && j < key_hi && (a.sliding_window <= 0 || j > qpos[r] - a.sliding_window);
        x = visible ? x : -INFINITY;
        s[nt][e] = x;
        tile_max[r] = fmaxf(tile_max[r], x);
      }
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullMask, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullMask, tile_max[r], 2));
      float m_new = fmaxf(m[r], tile_max[r]);
      corr[r] = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
      m[r] = m_new;
      l[r] *= corr[r];
    }
    uint32_t pf[kTileK / 16][4];  // P as A fragments, 16 keys per k-step
#pragma unroll
    for (int nt = 0; nt < kTileK / 8; ++nt) {
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int r = e >> 1;
        p[e] = m[r] == -INFINITY ? 0.0f : exp2f(s[nt][e] - m[r]);
        l[r] += p[e];
      }
      pf[nt / 2][(nt & 1) * 2 + 0] = pack_bf16(p[0], p[1]);
      pf[nt / 2][(nt & 1) * 2 + 1] = pack_bf16(p[2], p[3]);
    }
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      o[d][0] *= corr[0];
      o[d][1] *= corr[0];
      o[d][2] *= corr[1];
      o[d][3] *= corr[1];
    }
    // O += P V (V transposed in shared memory is the B operand).
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        const __nv_bfloat16* vr = &vt_s[(d * 8 + g) * kVStride + kk * 16 + 2 * t];
        mma_bf16(o[d], pf[kk], *reinterpret_cast<const uint32_t*>(vr),
                 *reinterpret_cast<const uint32_t*>(vr + 8));
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
    if (rows[r] >= q_count) continue;
    float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    __nv_bfloat16* dst = a.out + (first_token + rows[r]) * a.ld_out + h * kHeadDim + 2 * t;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      *reinterpret_cast<__nv_bfloat162*>(dst + d * 8) =
          __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    }
  }
}

}  // namespace

bool paged_attention_tiled_supported(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

cudaError_t paged_attention_tiled(const PagedAttentionArgs& a, cudaStream_t stream) {
  // An upper bound of the (sequence, tile) pairs; surplus blocks exit at once.
  dim3 grid(a.tokens / kTileQ + a.seqs, a.q_heads);
  switch (a.head_dim) {
    case 16:
      attention_tiled_kernel<16><<<grid, kThreads, 0, stream>>>(a);
      break;
    case 32:
      attention_tiled_kernel<32><<<grid, kThreads, 0, stream>>>(a);
      break;
    case 64:
      attention_tiled_kernel<64><<<grid, kThreads, 0, stream>>>(a);
      break;
    case 128:
      attention_tiled_kernel<128><<<grid, kThreads, 0, stream>>>(a);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace hearth::cuda::detail
