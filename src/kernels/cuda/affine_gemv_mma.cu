// Tensor-core affine GEMV for decode: y[m, n] = x[m, k] · wᵀ, w MLX-affine 4-bit, m <= 8.
//
// A block owns tiles of 16 weight rows (gated: 8 gate rows j and their up rows n + j; RoPE:
// rows i and i + head_dim / 2 of a head) and its 8 warps split k: warp w streams its share
// of each tile in chunks of 256 values straight into registers one chunk ahead of the math
// (two buffers named statically; a shared-memory cp.async ring, 2 chunks ahead, 3 blocks a
// multiprocessor and bulk-copy stages all lost on the H200: dev/cuda/NOTES.md). Lane (g = lane / 4,
// t = lane % 4) reads 8 bytes of rows g and g + 8 per 64 values (k 16t .. 16t + 15 of the step),
// and one LOP3 per two values makes the bf16 pair 128 + q exactly (q | 0x4300 in each half),
// already in mma.m16n8k16's A-fragment registers: the fragment's k positions are a fixed
// permutation of the lane's 16 values, and x is staged in shared memory in the same permutation, so
// the B fragments are two 16-byte loads per step. The mma's 8 columns are the x rows (decode
// batches of up to 8 cost what one does). Per 64 values (one step) the f32 sums c = Σ (128 + q)·x
// become s·(c - 128·Σx) + b·Σx with the group's scale and bias. x is staged exactly (bf16,
// optionally RMSNorm'd with rmsnorm_residual's bits), so, unlike the register kernel, nothing is
// rounded to half. The first chunks' copies go out before the PDL wait; the warps' sums meet in
// shared memory in a fixed order.
//
// Weights come row-major (MLX's: a chunk is 16 rows' 128-byte pieces, 8 loads of 8 bytes a
// lane plus 4 scale loads) or tiled (AffineLayout, relaid once by affine_tile: each (tile,
// chunk) one block of its 2 KB of weights in lane order and then its scales and biases, so a
// chunk is 4 coalesced 512-byte loads and 2 record loads a lane). The same registers result,
// so the same bits; on the H200 the tiled layout made every 8B shape 11-21 % faster (S16).
// A tiled weight carries its tile map (plain, gated pairs, RoPE pairs); besides its own pair
// epilogue it takes per-row stores through that map (an unfused call on a fused weight).
#include "kernels/cuda/affine_gemv_mma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/affine_gemv_epilogue.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_fusion.cuh"
#include "kernels/cuda/pdl.cuh"

namespace hearth::cuda::detail {
namespace {

constexpr int kWarps = 8;       // a block's warps (two blocks a multiprocessor) ...
constexpr int kWideWarps = 16;  // ... or one block of 16 (fused qkv / gate_up: block_warps)
constexpr int kStepK = 64;      // values per step: 4 x mma k16
constexpr int kChunkSteps = 4;  // steps per load batch
constexpr int kChunkK = kStepK * kChunkSteps;   // 256
constexpr int kMaxXRows = 8;                    // the mma's n
constexpr size_t kMaxSmem = size_t{160} << 10;  // dynamic shared memory per block
constexpr uint32_t kMagic = 0x43004300u;        // bf16 pair (128, 128)
constexpr uint32_t kNibbles = 0x000F000Fu;      // the low nibble of each half

// Shared memory per staged x row: k bf16 values in fragment order plus 16 bytes of padding
// (x rows of a multi-row batch start 4 banks apart), then the per-step sums Σx.
__host__ __device__ constexpr size_t x_row_bytes(int k) { return size_t(k) * 2 + 16; }
__host__ __device__ constexpr size_t x_bytes(int rows, int k) {
  return rows * x_row_bytes(k) + size_t(rows) * (k / kStepK) * sizeof(float);
}

// A scale or bias from its 16 bits.
template <typename ScaleT>
__device__ __forceinline__ float scale_to_float(uint32_t bits16) {
  if constexpr (sizeof(ScaleT) == 2 && std::is_same_v<ScaleT, __half>) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
  } else {
    return __uint_as_float(bits16 << 16);  // bf16
  }
}

// One warp's chunk in registers: 4 steps of 8 bytes of each of the lane's two rows, and the
// rows' scales and biases of those steps (4 groups of 64 or 2 of 128; the second word is
// unused at 128).
struct ChunkRegs {
  uint2 wa[kChunkSteps];
  uint2 wb[kChunkSteps];
  uint32_t sa[2], ba[2], sb[2], bb[2];
};

template <int kBytes>
__device__ __forceinline__ void load_scales(const char* p, uint32_t (&dst)[2]) {
  if constexpr (kBytes == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    dst[0] = v.x;
    dst[1] = v.y;
  } else {
    dst[0] = __ldg(reinterpret_cast<const uint32_t*>(p));
    dst[1] = 0;
  }
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// x [rows, k] -> shared memory in fragment order. A segment is 16 values (step s, lane t):
// words (x0,x4) (x1,x5) (x2,x6) (x3,x7) (x8,x12) (x9,x13) (x10,x14) (x11,x15), the pairs
// the lane's A fragments hold for mma 0..3 of the step (low half first). With norm_weight,
// x is first replaced by bf16(x * inv_rms * (weight + offset)), rmsnorm_residual's bits.
// Σx per step (f32, of the staged values) goes to sums [rows][steps].
template <int kThreads>
__device__ void stage_x(const __nv_bfloat16* x, int64_t ldx, int rows, int k,
                        const __nv_bfloat16* norm_weight, float norm_offset, const float* inv_rms,
                        char* smem, float* sums) {
  const int steps = k / kStepK;
  const int segments = rows * steps * 4;
  const int lane = threadIdx.x & 31;
  for (int base = (threadIdx.x >> 5) * 32; base < segments; base += kThreads) {
    const int seg = base + lane;
    float sum = 0.0f;
    if (seg < segments) {
      const int r = seg / (steps * 4);
      const int rest = seg - r * steps * 4;  // step * 4 + t
      const int col = rest * 16;             // = step * 64 + t * 16
      float v[16];
      load_bf16<16>(x + r * ldx + col, v);
      if (norm_weight != nullptr) {
        float g[16];
        load_bf16<16>(norm_weight + col, g);
        const float inv = inv_rms[r];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          v[i] = __bfloat162float(__float2bfloat16(v[i] * inv * (g[i] + norm_offset)));
        }
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) sum += v[i];
      uint4 lo;
      uint4 hi;
      lo.x = pack_bf16(v[0], v[4]);
      lo.y = pack_bf16(v[1], v[5]);
      lo.z = pack_bf16(v[2], v[6]);
      lo.w = pack_bf16(v[3], v[7]);
      hi.x = pack_bf16(v[8], v[12]);
      hi.y = pack_bf16(v[9], v[13]);
      hi.z = pack_bf16(v[10], v[14]);
      hi.w = pack_bf16(v[11], v[15]);
      uint4* dst = reinterpret_cast<uint4*>(smem + r * x_row_bytes(k)) + rest * 2;
      dst[0] = lo;
      dst[1] = hi;
    }
    // The step's four segments are lanes 4s .. 4s + 3 of this warp.
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    if (seg < segments && (lane & 3) == 0) sums[seg >> 2] = sum;
  }
}

// What a tile's 16 rows are (kMap): 16 consecutive rows; 8 gate rows j and their up rows
// n / 2 + j; 8 RoPE pairs (rows i and i + head_dim / 2 of a head). A row-major weight takes
// the map its epilogue needs; a tiled one was relaid in one map (AffineLayout).
enum Map { kMapPlain, kMapGated, kMapRope };
// What the sums become (kEpi): per-row stores (plain, residual add, accumulate; any map), the
// SiLU / GELU gate of each pair (gated map), RoPE + KV write of each pair (RoPE map).
enum Epi { kEpiRows, kEpiGated, kEpiRope };

// Tile `tile`'s row r (0..15) under kMap, for a matrix of `outputs` tasks (rows, or pairs),
// clamped into the matrix (a partial tile repeats its last row); *real is false for a clamped
// repeat, which is loaded but never stored.
template <int kMap>
__device__ __forceinline__ int64_t tile_row(int tile, int r, int outputs, int head_dim,
                                            bool* real) {
  if constexpr (kMap == kMapPlain) {
    const int i = tile * 16 + r;
    *real = i < outputs;
    return min(i, outputs - 1);
  } else {
    const int i = tile * 8 + (r & 7);
    *real = i < outputs;
    const int j = min(i, outputs - 1);
    if constexpr (kMap == kMapGated) {
      return r < 8 ? j : outputs + j;
    } else {
      const int half = head_dim / 2;
      const int head = j / half;
      const int64_t ra = static_cast<int64_t>(head) * head_dim + (j - head * half);
      return r < 8 ? ra : ra + half;
    }
  }
}

// A tiled block (AffineLayout, one per 16-row tile and 256-value chunk): 2 KB of weights in
// lane order (step u, lane l: 16 bytes at 512 u + 16 l, rows g and g + 8), then 8 scale
// records of 4 x kScaleBytes (row g's scales, its biases, row g + 8's scales, its biases).
__host__ __device__ constexpr int tiled_block_bytes(int group) { return 2048 + 32 * (512 / group); }

// rope_kv_write's stores for x row r's RoPE pair `task` (rows rounded to bf16 first, as the
// plain store would round them).
__device__ __forceinline__ void store_rope(const AffineGemvArgs& a, int r, int task, float v0,
                                           float v1) {
  const RopeKvWriteArgs& p = a.rope;
  rope_kv_store(p, r, task, __bfloat162float(__float2bfloat16(v0)),
                __bfloat162float(__float2bfloat16(v1)), static_cast<float>(p.positions[r]),
                p.slots[r], p.inv_freq[task % (p.head_dim / 2)]);
}

// kMulti: more than one x row (all 8 mma columns kept); otherwise only column 0. kTiled: the
// weight is in a tiled layout (its map is kMap); otherwise row-major (MLX's). kW: warps a
// block (kWarps, two blocks a multiprocessor, or kWideWarps, one).
template <typename ScaleT, typename OutT, int kGroup, int kMap, int kEpi, bool kMulti, bool kTiled,
          int kW = kWarps>
__global__ void __launch_bounds__(kW * 32, kWideWarps / kW)
    affine_gemv_mma_kernel(const AffineGemvArgs a, int x_rows) {
  constexpr int kThreads = kW * 32;
  constexpr int kScaleBytes = 2 * kChunkK / kGroup;  // per row and chunk: 8 or 4
  constexpr int kBlockBytes = tiled_block_bytes(kGroup);
  extern __shared__ __align__(16) char smem[];
  __shared__ float red[2][kW][32 * 4];
  __shared__ float scratch[32];
  __shared__ float inv_rms[kMaxXRows];

  const AffineQuantWeight& w = a.w;
  const int k = w.k;
  const int steps = k / kStepK;
  const int chunks = k / kChunkK;
  const int groups = k / kGroup;
  constexpr bool kPair = kMap != kMapPlain;
  const int outputs = kPair ? w.n / 2 : w.n;  // tasks: outputs, gated outputs, RoPE pairs
  constexpr int kTileOut = kPair ? 8 : 16;    // tasks per tile
  const int tiles = ceil_div(outputs, kTileOut);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int cb = warp * chunks / kW;  // this warp's chunks of every tile: [cb, ce)
  const int ce = (warp + 1) * chunks / kW;
  const int per_tile = ce - cb;
  const int64_t row_bytes = k / 2;
  const char* packed = reinterpret_cast<const char*>(w.packed);
  const char* scales = static_cast<const char*>(w.scales);
  const char* biases = static_cast<const char*>(w.biases);
  // The next chunk of this warp's sequence to load (chunks cb .. ce - 1 of tile blockIdx.x,
  // then of tile blockIdx.x + gridDim.x, ...): every load takes the next one, so loads go
  // in sequence order (W3: a division per load cost ~10 % of the kernel's time).
  int next_tile = blockIdx.x;
  int next_chunk = cb;
  auto position = [&](int& tile, int& chunk) {
    tile = next_tile;
    chunk = next_chunk;
    if (++next_chunk >= ce) {
      next_chunk = cb;
      next_tile += gridDim.x;
    }
    return per_tile > 0 && tile < tiles;
  };

  const int head_dim = kTiled ? w.tile_head_dim : a.rope.head_dim;  // the RoPE map's
  // Tile row r's weight row (clamped; see tile_row).
  auto weight_row = [&](int tile, int r) -> int64_t {
    bool real;
    return tile_row<kMap>(tile, r, outputs, head_dim, &real);
  };
  // A chunk's 8 bytes per step of rows g and g + 8 straight from global memory, with its
  // scales and biases: tiled, 4 coalesced 512-byte loads of the 2 KB block and the lane's
  // scale record; row-major, 8 loads of 8 bytes from 16 rows and 4 of the scales.
  auto load_regs = [&](ChunkRegs& d) {
    int tile;
    int chunk;
    if (!position(tile, chunk)) return;
    if constexpr (kTiled) {
      const char* block = packed + (static_cast<int64_t>(tile) * chunks + chunk) *
                                       static_cast<int64_t>(kBlockBytes);
      const uint4* p = reinterpret_cast<const uint4*>(block) + lane;
#pragma unroll
      for (int u = 0; u < kChunkSteps; ++u) {
        const uint4 v = load_stream16(p + u * 32);
        d.wa[u] = make_uint2(v.x, v.y);
        d.wb[u] = make_uint2(v.z, v.w);
      }
      const uint4* rec = reinterpret_cast<const uint4*>(block + 2048 + g * 4 * kScaleBytes);
      if constexpr (kScaleBytes == 8) {
        const uint4 v0 = __ldg(rec);
        const uint4 v1 = __ldg(rec + 1);
        d.sa[0] = v0.x, d.sa[1] = v0.y, d.ba[0] = v0.z, d.ba[1] = v0.w;
        d.sb[0] = v1.x, d.sb[1] = v1.y, d.bb[0] = v1.z, d.bb[1] = v1.w;
      } else {
        const uint4 v = __ldg(rec);
        d.sa[0] = v.x, d.ba[0] = v.y, d.sb[0] = v.z, d.bb[0] = v.w;
        d.sa[1] = d.ba[1] = d.sb[1] = d.bb[1] = 0;
      }
    } else {
      const int64_t ra = weight_row(tile, g);
      const int64_t rb = weight_row(tile, g + 8);
      const uint2* pa = reinterpret_cast<const uint2*>(packed + ra * row_bytes) + chunk * 16 + t;
      const uint2* pb = reinterpret_cast<const uint2*>(packed + rb * row_bytes) + chunk * 16 + t;
#pragma unroll
      for (int u = 0; u < kChunkSteps; ++u) {
        d.wa[u] = load_stream8(pa + u * 4);
        d.wb[u] = load_stream8(pb + u * 4);
      }
      const int64_t s0 = static_cast<int64_t>(chunk) * kScaleBytes;
      load_scales<kScaleBytes>(scales + ra * groups * 2 + s0, d.sa);
      load_scales<kScaleBytes>(biases + ra * groups * 2 + s0, d.ba);
      load_scales<kScaleBytes>(scales + rb * groups * 2 + s0, d.sb);
      load_scales<kScaleBytes>(biases + rb * groups * 2 + s0, d.bb);
    }
  };

  // Weights never depend on the previous kernel: the first chunk goes out before the wait.
  ChunkRegs r0;
  ChunkRegs r1;
  load_regs(r0);

  grid_dependency_wait();
  if (a.norm_weight != nullptr) {
    block_inverse_rms<kThreads>(a.x, a.ldx, x_rows, k, a.norm_eps, inv_rms, scratch);
  }
  float* sums = reinterpret_cast<float*>(smem + x_rows * x_row_bytes(k));
  stage_x<kThreads>(a.x, a.ldx, x_rows, k, a.norm_weight, a.norm_offset, inv_rms, smem, sums);
  __syncthreads();
  launch_dependents();

  // B fragments: x row g (column g of the mma); extra columns repeat the last row.
  const int xr = kMulti ? min(g, x_rows - 1) : 0;
  const uint4* xs = reinterpret_cast<const uint4*>(smem + xr * x_row_bytes(k)) + t * 2;
  const int c0 = kMulti ? min(2 * t, x_rows - 1) : 0;  // the lane's output columns
  const int c1 = kMulti ? min(2 * t + 1, x_rows - 1) : 0;
  const float* sum0 = sums + c0 * steps;
  const float* sum1 = sums + c1 * steps;

  // One chunk's math: 4 steps of 4 mmas into c, then the groups' scale and bias into acc.
  auto consume = [&](const ChunkRegs& cur, int chunk, float(&acc)[4]) {
    const uint32_t* sa_w = cur.sa;
    const uint32_t* sb_w = cur.sb;
    const uint32_t* ba_w = cur.ba;
    const uint32_t* bb_w = cur.bb;
#pragma unroll
    for (int u = 0; u < kChunkSteps; ++u) {
      const int step = chunk * kChunkSteps + u;
      const uint2 wav = cur.wa[u];
      const uint2 wbv = cur.wb[u];
      const uint4 xa = xs[step * 8];
      const uint4 xb = xs[step * 8 + 1];
      const uint32_t bx[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
      const uint32_t wa[2] = {wav.x, wav.y};
      const uint32_t wb[2] = {wbv.x, wbv.y};
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t va = wa[j >> 1] >> ((j & 1) * 8);
        const uint32_t vb = wb[j >> 1] >> ((j & 1) * 8);
        mma_bf16(c, (va & kNibbles) | kMagic, (vb & kNibbles) | kMagic,
                 ((va >> 4) & kNibbles) | kMagic, ((vb >> 4) & kNibbles) | kMagic, bx[2 * j],
                 bx[2 * j + 1]);
      }
      const int gi = u * kStepK / kGroup;  // the step's group within the chunk
      const int sh = (gi & 1) * 16;
      const float s_a = scale_to_float<ScaleT>((sa_w[gi >> 1] >> sh) & 0xFFFFu);
      const float b_a = scale_to_float<ScaleT>((ba_w[gi >> 1] >> sh) & 0xFFFFu);
      const float s_b = scale_to_float<ScaleT>((sb_w[gi >> 1] >> sh) & 0xFFFFu);
      const float b_b = scale_to_float<ScaleT>((bb_w[gi >> 1] >> sh) & 0xFFFFu);
      const float x0 = sum0[step];
      acc[0] = fmaf(s_a, fmaf(-128.0f, x0, c[0]), fmaf(b_a, x0, acc[0]));
      acc[2] = fmaf(s_b, fmaf(-128.0f, x0, c[2]), fmaf(b_b, x0, acc[2]));
      if constexpr (kMulti) {
        const float x1 = sum1[step];
        acc[1] = fmaf(s_a, fmaf(-128.0f, x1, c[1]), fmaf(b_a, x1, acc[1]));
        acc[3] = fmaf(s_b, fmaf(-128.0f, x1, c[3]), fmaf(b_b, x1, acc[3]));
      }
    }
  };

  int parity = 0;
  int f = 0;  // this warp's position in its chunk sequence
  // Per-row outputs whose epilogue reads y (residual add, accumulate): warp 0 loads those
  // values when a tile starts, so the store after the sums waits for no load (o and down
  // have one tile a block: that read was the kernel's last L2 round trip).
  const bool early_y = kEpi == kEpiRows && affine_epilogue_reads_y(a);
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // uniform across the block
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};    // (row a, col c0) (a, c1) (b, c0) (b, c1)
    float prior[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // y at the same places (early_y)
    // kEpiRows: the lane's two output rows (g and g + 8 of the tile) and whether each is real.
    bool real_a = false;
    bool real_b = false;
    const int64_t row_a = tile_row<kMap>(tile, g, outputs, head_dim, &real_a);
    const int64_t row_b = tile_row<kMap>(tile, g + 8, outputs, head_dim, &real_b);
    if (early_y && warp == 0) {
#pragma unroll
      for (int ci = 0; ci < (kMulti ? 2 : 1); ++ci) {
        const int col = 2 * t + ci;
        if (col >= x_rows || (!kMulti && t != 0)) continue;
        if (real_a) prior[ci] = affine_prior_output<OutT>(a, col, static_cast<int>(row_a));
        if (real_b) prior[2 + ci] = affine_prior_output<OutT>(a, col, static_cast<int>(row_b));
      }
    }
    for (int chunk = cb; chunk < ce; ++chunk, ++f) {
      // Two buffers named statically in each branch: chunk f + 1 loads into the one chunk
      // f - 1 left while chunk f is consumed. (W1-W6's `cur = r0; load(r0)` let the compiler
      // copy the fresh registers mid-chunk, and the copy waited for the load: Nsight Compute
      // put 29 % of gate_up's stall samples on that one move.)
      if ((f & 1) == 0) {
        load_regs(r1);
        consume(r0, chunk, acc);
      } else {
        load_regs(r0);
        consume(r1, chunk, acc);
      }
    }

    // The warps' partial sums, added in warp order by warp 0.
    float* mine = red[parity][warp] + lane * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) mine[i] = acc[i];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = red[parity][0][lane * 4 + i];
      for (int v = 1; v < kW; ++v) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] += red[parity][v][lane * 4 + i];
      }
      const int cols = kMulti ? 2 : 1;
#pragma unroll
      for (int ci = 0; ci < cols; ++ci) {
        const int col = 2 * t + ci;
        if (col >= x_rows || (!kMulti && t != 0)) continue;
        if constexpr (kEpi == kEpiGated) {
          const int j = tile * 8 + g;
          if (j < outputs) affine_store_output<OutT>(a, col, j, acc[ci], acc[2 + ci]);
        } else if constexpr (kEpi == kEpiRope) {
          const int j = tile * 8 + g;
          if (j < outputs) store_rope(a, col, j, acc[ci], acc[2 + ci]);
        } else {
          if (real_a) {
            affine_store_output<OutT>(a, col, static_cast<int>(row_a), acc[ci], 0.0f, prior[ci]);
          }
          if (real_b) {
            affine_store_output<OutT>(a, col, static_cast<int>(row_b), acc[2 + ci], 0.0f,
                                      prior[2 + ci]);
          }
        }
      }
    }
    parity ^= 1;
  }
}

int device_optin_smem() {
  int device = 0;
  int optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
      cudaSuccess) {
    return 0;
  }
  return optin;
}

// Static shared memory of the kernel (red, scratch, inv_rms) plus a margin.
constexpr size_t kStaticSmem = sizeof(float) * (2 * kWideWarps * 32 * 4 + 32 + kMaxXRows) + 1024;

size_t smem_cap() {
  const int optin = device_optin_smem();
  return std::min(kMaxSmem, static_cast<size_t>(std::max(optin, 0)) > kStaticSmem
                                ? static_cast<size_t>(optin) - kStaticSmem
                                : 0);
}

// Launch (or, with per_sm_out, only report the occupancy of) one instantiation.
template <typename ScaleT, typename OutT, int kGroup, int kMap, int kEpi, bool kMulti, bool kTiled,
          int kW = kWarps>
cudaError_t launch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm_out) {
  constexpr bool kPair = kMap != kMapPlain;
  constexpr int kThreads = kW * 32;
  auto* kernel = affine_gemv_mma_kernel<ScaleT, OutT, kGroup, kMap, kEpi, kMulti, kTiled, kW>;
  const size_t smem = x_bytes(x_rows, a.w.k);
  if (smem > 48 * 1024) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  int per_sm = 0;
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem);
  if (err != cudaSuccess) return err;
  if (per_sm_out != nullptr) {
    *per_sm_out = per_sm;
    return cudaSuccess;
  }
  const int outputs = kPair ? a.w.n / 2 : a.w.n;
  const int tiles = ceil_div(outputs, kPair ? 8 : 16);
  const int grid = std::min(tiles, std::max(1, a.sm_count) * std::max(1, per_sm));
  return launch_kernel(kernel, dim3(grid), dim3(kThreads), smem, stream, a.pdl, a, x_rows);
}

bool gated_epilogue(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

// AffineGemvArgs::block_warps of the fused qkv (RoPE) and gate_up (gated) GEMVs on a tiled
// weight at one x row (the other forms keep kWarps): 8 or 16 when forced; else kWideWarps
// when a block of them (one a multiprocessor: its RMSNorm prologue and x staging done once
// an SM, not twice; a chunk a warp a tile) walks no more chunks a warp than kWarps warps at
// two blocks a multiprocessor (8B on 132 SMs: qkv 3 against 4, gate_up 14 against 14).
// S17-W5/W6: qkv 10.4 -> 8.6 us and gate_up -0.4 us a layer in the lab's decode step; o and
// down (no prologue to share) were slower at 16, lm_head the same.
int tiled_block_warps(const AffineGemvArgs& a, bool pair) {
  if (a.epilogue != GemvEpilogue::kRopeKvWrite && !gated_epilogue(a.epilogue)) return kWarps;
  if (a.block_warps == kWarps || a.block_warps == kWideWarps) return a.block_warps;
  const int sms = std::max(1, a.sm_count);
  const int tiles = ceil_div(pair ? a.w.n / 2 : a.w.n, pair ? 8 : 16);
  const int chunks = a.w.k / kChunkK;
  const int narrow = ceil_div(tiles, 2 * sms) * ceil_div(chunks, kWarps);
  const int wide = ceil_div(tiles, sms) * ceil_div(chunks, kWideWarps);
  return wide <= narrow ? kWideWarps : kWarps;
}

// A tiled weight's launch: the fused qkv and gated forms at one x row may take kWideWarps
// (tiled_block_warps; the other forms are not instantiated with them).
template <typename ScaleT, typename OutT, int kGroup, int kMap, int kEpi, bool kMulti>
cudaError_t launch_tiled(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm) {
  if constexpr (!kMulti && (kEpi == kEpiRope || kEpi == kEpiGated)) {
    if (per_sm == nullptr && tiled_block_warps(a, kMap != kMapPlain) == kWideWarps) {
      return launch<ScaleT, OutT, kGroup, kMap, kEpi, false, true, kWideWarps>(a, x_rows, stream,
                                                                               nullptr);
    }
  }
  return launch<ScaleT, OutT, kGroup, kMap, kEpi, kMulti, true>(a, x_rows, stream, per_sm);
}

// The (map, epilogue) pair a call runs: a row-major weight takes the map its epilogue needs;
// a tiled one keeps its layout's map, with its pair epilogue or per-row stores.
template <typename ScaleT, typename OutT, int kGroup, bool kMulti>
cudaError_t dispatch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm) {
  const bool pair = gated_epilogue(a.epilogue);
  const bool rope = a.epilogue == GemvEpilogue::kRopeKvWrite;
  switch (a.w.layout) {
    case AffineLayout::kRowMajor:
      if constexpr (sizeof(OutT) == 2) {
        if (pair) {
          return launch<ScaleT, OutT, kGroup, kMapGated, kEpiGated, kMulti, false>(a, x_rows,
                                                                                   stream, per_sm);
        }
        if (rope) {
          return launch<ScaleT, OutT, kGroup, kMapRope, kEpiRope, kMulti, false>(a, x_rows, stream,
                                                                                 per_sm);
        }
      }
      return launch<ScaleT, OutT, kGroup, kMapPlain, kEpiRows, kMulti, false>(a, x_rows, stream,
                                                                              per_sm);
    case AffineLayout::kTiledPlain:
      return launch_tiled<ScaleT, OutT, kGroup, kMapPlain, kEpiRows, kMulti>(a, x_rows, stream,
                                                                             per_sm);
    case AffineLayout::kTiledGated:
      if constexpr (sizeof(OutT) == 2) {
        if (pair) {
          return launch_tiled<ScaleT, OutT, kGroup, kMapGated, kEpiGated, kMulti>(a, x_rows, stream,
                                                                                  per_sm);
        }
      }
      return launch_tiled<ScaleT, OutT, kGroup, kMapGated, kEpiRows, kMulti>(a, x_rows, stream,
                                                                             per_sm);
    case AffineLayout::kTiledRope:
      if constexpr (sizeof(OutT) == 2) {
        if (rope) {
          return launch_tiled<ScaleT, OutT, kGroup, kMapRope, kEpiRope, kMulti>(a, x_rows, stream,
                                                                                per_sm);
        }
      }
      return launch_tiled<ScaleT, OutT, kGroup, kMapRope, kEpiRows, kMulti>(a, x_rows, stream,
                                                                            per_sm);
  }
  return cudaErrorInvalidValue;
}

template <typename ScaleT, typename OutT>
cudaError_t dispatch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm) {
  const bool one = x_rows == 1;
  if (a.w.group_size == 64) {
    return one ? dispatch<ScaleT, OutT, 64, false>(a, x_rows, stream, per_sm)
               : dispatch<ScaleT, OutT, 64, true>(a, x_rows, stream, per_sm);
  }
  return one ? dispatch<ScaleT, OutT, 128, false>(a, x_rows, stream, per_sm)
             : dispatch<ScaleT, OutT, 128, true>(a, x_rows, stream, per_sm);
}

cudaError_t dispatch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm) {
  if (a.y_f32) {
    return a.w.f16_scales ? dispatch<__half, float>(a, x_rows, stream, per_sm)
                          : dispatch<__nv_bfloat16, float>(a, x_rows, stream, per_sm);
  }
  return a.w.f16_scales ? dispatch<__half, __nv_bfloat16>(a, x_rows, stream, per_sm)
                        : dispatch<__nv_bfloat16, __nv_bfloat16>(a, x_rows, stream, per_sm);
}

}  // namespace

bool affine_gemv_mma_supported(const AffineGemvArgs& a) {
  const AffineQuantWeight& w = a.w;
  if (w.bits != 4 || (w.group_size != 64 && w.group_size != 128) || w.k % kChunkK != 0) {
    return false;
  }
  if (a.norm_weight != nullptr && reinterpret_cast<uintptr_t>(a.norm_weight) % 16 != 0) {
    return false;
  }
  const bool pair = gated_epilogue(a.epilogue);
  const bool rope = a.epilogue == GemvEpilogue::kRopeKvWrite;
  switch (w.layout) {
    case AffineLayout::kRowMajor: {
      const uintptr_t align = w.group_size == 64 ? 8 : 4;
      if (reinterpret_cast<uintptr_t>(w.scales) % align != 0 ||
          reinterpret_cast<uintptr_t>(w.biases) % align != 0 ||
          reinterpret_cast<uintptr_t>(w.packed) % 8 != 0) {
        return false;
      }
      break;
    }
    case AffineLayout::kTiledPlain:
      if (pair || rope) return false;
      break;
    case AffineLayout::kTiledGated:
      if (rope || w.n % 2 != 0) return false;
      break;
    case AffineLayout::kTiledRope:
      if (pair || w.tile_head_dim < 2 || w.tile_head_dim % 2 != 0 || w.n % w.tile_head_dim != 0 ||
          (rope && a.rope.head_dim != w.tile_head_dim)) {
        return false;
      }
      break;
  }
  if (w.layout != AffineLayout::kRowMajor && reinterpret_cast<uintptr_t>(w.packed) % 16 != 0) {
    return false;
  }
  return x_bytes(1, w.k) <= smem_cap();
}

cudaError_t affine_gemv_mma(const AffineGemvArgs& args, cudaStream_t stream) {
  if (!affine_gemv_mma_supported(args)) return cudaErrorInvalidValue;
  // x rows a launch stages (one always fits: affine_gemv_mma_supported).
  const int batch = static_cast<int>(std::min<size_t>(
      {static_cast<size_t>(args.m), smem_cap() / x_bytes(1, args.w.k), kMaxXRows}));
  const size_t out_size = args.y_f32 ? sizeof(float) : sizeof(__nv_bfloat16);
  for (int r0 = 0; r0 < args.m; r0 += batch) {
    AffineGemvArgs a = args;
    a.x = args.x + r0 * args.ldx;
    if (a.epilogue == GemvEpilogue::kRopeKvWrite) {
      a.rope.positions = args.rope.positions + r0;
      a.rope.slots = args.rope.slots + r0;
      a.rope.q_out = args.rope.q_out + r0 * args.rope.ld_q_out;
    } else {
      a.y = static_cast<char*>(args.y) + r0 * args.ldy * out_size;
    }
    cudaError_t err = dispatch(a, std::min(batch, args.m - r0), stream, nullptr);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

int affine_gemv_mma_blocks_per_sm(const AffineGemvArgs& a) {
  int per_sm = 0;
  if (!affine_gemv_mma_supported(a)) return 0;
  if (dispatch(a, 1, nullptr, &per_sm) != cudaSuccess) return 0;
  return per_sm;
}

namespace {

// The tiled map of a layout and the number of tasks (rows, or pairs) its tiles cover.
__host__ __device__ int layout_map(AffineLayout layout) {
  return layout == AffineLayout::kTiledGated  ? kMapGated
         : layout == AffineLayout::kTiledRope ? kMapRope
                                              : kMapPlain;
}

// tile_row with the map known at run time (the relayout and tiled-dequantize kernels).
__device__ __forceinline__ int64_t mapped_row(int map, int tile, int r, int outputs, int head_dim,
                                              bool* real) {
  switch (map) {
    case kMapGated:
      return tile_row<kMapGated>(tile, r, outputs, head_dim, real);
    case kMapRope:
      return tile_row<kMapRope>(tile, r, outputs, head_dim, real);
    default:
      return tile_row<kMapPlain>(tile, r, outputs, head_dim, real);
  }
}

// The tiled blocks of w: tiles x chunks of them (see tiled_block_bytes).
struct TiledGeometry {
  int map, outputs, chunks, blocks, scale_bytes, per;  // per: groups a chunk
  __host__ __device__ TiledGeometry(const AffineQuantWeight& w, AffineLayout layout) {
    map = layout_map(layout);
    outputs = map == kMapPlain ? w.n : w.n / 2;
    chunks = w.k / kChunkK;
    blocks = ceil_div(outputs, map == kMapPlain ? 16 : 8) * chunks;
    scale_bytes = 2 * kChunkK / w.group_size;
    per = scale_bytes / 2;
  }
};

// A block of 128 threads a tiled block at a time: thread (u, lane) is the lane slot of step
// u, 8 bytes of each of the lane's two rows; the slots of step 0, t == 0 also write the rows'
// scale record.
__global__ void __launch_bounds__(128)
    tile_layout_kernel(AffineQuantWeight w, AffineLayout layout, int head_dim, char* dst) {
  const TiledGeometry geo(w, layout);
  const int64_t block_bytes = tiled_block_bytes(w.group_size);
  const int groups = w.k / w.group_size;
  const int64_t row_bytes = w.k / 2;
  const char* packed = reinterpret_cast<const char*>(w.packed);
  const auto* sc = static_cast<const uint16_t*>(w.scales);
  const auto* bi = static_cast<const uint16_t*>(w.biases);
  const int u = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  for (int tc = blockIdx.x; tc < geo.blocks; tc += gridDim.x) {
    const int tile = tc / geo.chunks;
    const int chunk = tc - tile * geo.chunks;
    bool real;
    const int64_t ra = mapped_row(geo.map, tile, g, geo.outputs, head_dim, &real);
    const int64_t rb = mapped_row(geo.map, tile, g + 8, geo.outputs, head_dim, &real);
    const int64_t off = chunk * 128 + u * 32 + t * 8;
    const uint2 a = *reinterpret_cast<const uint2*>(packed + ra * row_bytes + off);
    const uint2 b = *reinterpret_cast<const uint2*>(packed + rb * row_bytes + off);
    char* block = dst + tc * block_bytes;
    reinterpret_cast<uint4*>(block)[u * 32 + lane] = make_uint4(a.x, a.y, b.x, b.y);
    if (u == 0 && t == 0) {
      auto* rec = reinterpret_cast<uint16_t*>(block + 2048 + g * 4 * geo.scale_bytes);
      for (int j = 0; j < geo.per; ++j) {
        const int64_t ga = ra * groups + chunk * geo.per + j;
        const int64_t gb = rb * groups + chunk * geo.per + j;
        rec[j] = sc[ga];
        rec[geo.per + j] = bi[ga];
        rec[2 * geo.per + j] = sc[gb];
        rec[3 * geo.per + j] = bi[gb];
      }
    }
  }
}

// The inverse: a block of 128 threads a tiled block at a time, each thread 4 of its 512
// output pieces (tile row r, values 8p .. 8p + 7 of the chunk), so a warp writes one row's
// 512 contiguous bytes; the values as affine_dequantize's row-major kernel computes them
// (s * q + b, rounded to bf16 in pairs).
template <typename ScaleT>
__global__ void __launch_bounds__(128)
    dequantize_tiled_kernel(AffineQuantWeight w, __nv_bfloat16* out, int64_t ld_out) {
  const TiledGeometry geo(w, w.layout);
  const int64_t block_bytes = tiled_block_bytes(w.group_size);
  const char* packed = reinterpret_cast<const char*>(w.packed);
  for (int tc = blockIdx.x; tc < geo.blocks; tc += gridDim.x) {
    const int tile = tc / geo.chunks;
    const int chunk = tc - tile * geo.chunks;
    const char* block = packed + tc * block_bytes;
    for (int piece = threadIdx.x; piece < 512; piece += 128) {
      const int r = piece >> 5;  // tile row
      const int p = piece & 31;  // 8-value piece of its 256
      bool real;
      const int64_t row = mapped_row(geo.map, tile, r, geo.outputs, w.tile_head_dim, &real);
      if (!real) continue;
      const int u = p >> 3;        // step
      const int t = (p >> 1) & 3;  // the lane (g = r % 8, t) that holds it
      const int word = p & 1;      // which of that lane's two words of row r
      const int second = r >> 3;   // rows g + 8: the slot's second 8 bytes
      const int g = r & 7;
      const uint32_t q = __ldg(reinterpret_cast<const uint32_t*>(block) + (u * 32 + g * 4 + t) * 4 +
                               second * 2 + word);
      const auto* rec = reinterpret_cast<const uint16_t*>(block + 2048 + g * 4 * geo.scale_bytes);
      const int gi = (u * kStepK) / w.group_size;  // the piece's group within the chunk
      const float s = scale_to_float<ScaleT>(rec[2 * second * geo.per + gi]);
      const float b = scale_to_float<ScaleT>(rec[(2 * second + 1) * geo.per + gi]);
      uint32_t o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float f0 = s * static_cast<float>((q >> (8 * j)) & 15u) + b;
        const float f1 = s * static_cast<float>((q >> (8 * j + 4)) & 15u) + b;
        const __nv_bfloat162 h = __floats2bfloat162_rn(f0, f1);
        o[j] = *reinterpret_cast<const uint32_t*>(&h);
      }
      const int col = chunk * kChunkK + u * kStepK + t * 16 + word * 8;
      __stcs(reinterpret_cast<uint4*>(out + row * ld_out + col),
             make_uint4(o[0], o[1], o[2], o[3]));
    }
  }
}

// Blocks for a walk over the tiled blocks: enough to fill any device several times over.
int tiled_grid(const TiledGeometry& geo) { return std::max(1, std::min(geo.blocks, 8192)); }

}  // namespace

cudaError_t affine_dequantize_tiled(const AffineQuantWeight& w, __nv_bfloat16* out, int64_t ld_out,
                                    cudaStream_t stream) {
  if (w.layout == AffineLayout::kRowMajor || ld_out % 8 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int grid = tiled_grid(TiledGeometry(w, w.layout));
  if (w.f16_scales) {
    dequantize_tiled_kernel<__half><<<grid, 128, 0, stream>>>(w, out, ld_out);
  } else {
    dequantize_tiled_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(w, out, ld_out);
  }
  return cudaGetLastError();
}

}  // namespace hearth::cuda::detail

namespace hearth::cuda {

size_t affine_tiled_bytes(const AffineQuantWeight& w, AffineLayout layout) {
  const bool plain = layout == AffineLayout::kTiledPlain;
  const int outputs = plain ? w.n : w.n / 2;
  const size_t tiles = static_cast<size_t>(detail::ceil_div(outputs, plain ? 16 : 8));
  return tiles * (w.k / detail::kChunkK) * detail::tiled_block_bytes(w.group_size);
}

bool affine_tiling_supported(const AffineQuantWeight& w, AffineLayout layout, int head_dim) {
  if (w.layout != AffineLayout::kRowMajor || w.bits != 4 ||
      (w.group_size != 64 && w.group_size != 128) || w.k % detail::kChunkK != 0 || w.n < 1 ||
      w.packed == nullptr || w.scales == nullptr || w.biases == nullptr ||
      reinterpret_cast<uintptr_t>(w.packed) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(w.scales) % 2 != 0 ||
      reinterpret_cast<uintptr_t>(w.biases) % 2 != 0) {
    return false;
  }
  switch (layout) {
    case AffineLayout::kTiledPlain:
      return true;
    case AffineLayout::kTiledGated:
      return w.n % 2 == 0;
    case AffineLayout::kTiledRope:
      return head_dim >= 2 && head_dim % 2 == 0 && w.n % head_dim == 0;
    case AffineLayout::kRowMajor:
      break;
  }
  return false;
}

cudaError_t affine_tile(const AffineQuantWeight& w, AffineLayout layout, int head_dim, void* dst,
                        cudaStream_t stream) {
  if (!affine_tiling_supported(w, layout, head_dim) || reinterpret_cast<uintptr_t>(dst) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int grid = detail::tiled_grid(detail::TiledGeometry(w, layout));
  detail::tile_layout_kernel<<<grid, 128, 0, stream>>>(w, layout, head_dim,
                                                       static_cast<char*>(dst));
  return cudaGetLastError();
}

}  // namespace hearth::cuda
