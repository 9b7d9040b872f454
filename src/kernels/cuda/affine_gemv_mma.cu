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

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kStepK = 64;                      // values per step: 4 x mma k16
constexpr int kChunkSteps = 4;                  // steps per load batch
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

__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p));
  return v;
}

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

// What a tile's two row sets are: 16 rows; gate rows j and up rows n + j; RoPE pairs.
enum Mode { kSingle, kGated, kRope };

// rope_kv_write's stores for x row r's RoPE pair `task` (rows rounded to bf16 first, as the
// plain store would round them).
__device__ __forceinline__ void store_rope(const AffineGemvArgs& a, int r, int task, float v0,
                                           float v1) {
  const RopeKvWriteArgs& p = a.rope;
  rope_kv_store(p, r, task, __bfloat162float(__float2bfloat16(v0)),
                __bfloat162float(__float2bfloat16(v1)), static_cast<float>(p.positions[r]),
                p.slots[r], p.inv_freq[task % (p.head_dim / 2)]);
}

// kMulti: more than one x row (all 8 mma columns kept); otherwise only column 0. kDesign
// (MmaDesign): how weights reach the registers.
template <typename ScaleT, typename OutT, int kGroup, int kMode, bool kMulti, int kDesign>
__global__ void __launch_bounds__(kThreads, 2)
    affine_gemv_mma_kernel(const AffineGemvArgs a, int x_rows) {
  constexpr bool kEarly = kDesign == kMmaRegistersEarly;  // chunk 1 also before the wait
  constexpr int kScaleBytes = 2 * kChunkK / kGroup;       // per row and chunk: 8 or 4
  extern __shared__ __align__(16) char smem[];
  __shared__ float red[2][kWarps][32 * 4];
  __shared__ float scratch[32];
  __shared__ float inv_rms[kMaxXRows];

  const AffineQuantWeight& w = a.w;
  const int k = w.k;
  const int steps = k / kStepK;
  const int chunks = k / kChunkK;
  const int groups = k / kGroup;
  constexpr bool kPair = kMode != kSingle;
  const int outputs = kPair ? w.n / 2 : w.n;  // tasks: outputs, gated outputs, RoPE pairs
  constexpr int kTileOut = kPair ? 8 : 16;    // tasks per tile
  const int tiles = ceil_div(outputs, kTileOut);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int cb = warp * chunks / kWarps;  // this warp's chunks of every tile: [cb, ce)
  const int ce = (warp + 1) * chunks / kWarps;
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

  // Weight row of tile row r (0..15; the pair's second row set is 8..15), clamped into the
  // matrix (the surplus is not stored).
  auto weight_row = [&](int tile, int r) -> int64_t {
    if constexpr (kMode == kGated) {
      const int j = min(tile * 8 + (r & 7), outputs - 1);
      return r < 8 ? j : outputs + j;
    } else if constexpr (kMode == kRope) {
      const int j = min(tile * 8 + (r & 7), outputs - 1);
      const int half = a.rope.head_dim / 2;
      const int head = j / half;
      const int64_t ra = static_cast<int64_t>(head) * a.rope.head_dim + (j - head * half);
      return r < 8 ? ra : ra + half;
    } else {
      return min(tile * 16 + r, outputs - 1);
    }
  };
  // A chunk's 8 bytes per step of rows g and g + 8 straight from
  // global memory, with its scales and biases.
  auto load_regs = [&](ChunkRegs& d) {
    int tile;
    int chunk;
    if (!position(tile, chunk)) return;
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
  };

  // Weights never depend on the previous kernel: the first chunks go out before the wait.
  ChunkRegs r0;
  ChunkRegs r1;
  load_regs(r0);
  if constexpr (kEarly) load_regs(r1);

  grid_dependency_wait();
  if (a.norm_weight != nullptr) {
    block_inverse_rms<kThreads>(a.x, a.ldx, x_rows, k, a.norm_eps, inv_rms, scratch);
  }
  float* sums = reinterpret_cast<float*>(smem + x_rows * x_row_bytes(k));
  stage_x(a.x, a.ldx, x_rows, k, a.norm_weight, a.norm_offset, inv_rms, smem, sums);
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
  // Plain outputs whose epilogue reads y (residual add, accumulate): warp 0 loads those
  // values when a tile starts, so the store after the sums waits for no load (o and down
  // have one tile a block: that read was the kernel's last L2 round trip).
  const bool early_y = kMode == kSingle && affine_epilogue_reads_y(a);
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // uniform across the block
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};    // (row a, col c0) (a, c1) (b, c0) (b, c1)
    float prior[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // y at the same places (early_y)
    if (early_y && warp == 0) {
      const int ra = tile * 16 + g;
#pragma unroll
      for (int ci = 0; ci < (kMulti ? 2 : 1); ++ci) {
        const int col = 2 * t + ci;
        if (col >= x_rows || (!kMulti && t != 0)) continue;
        if (ra < outputs) prior[ci] = affine_prior_output<OutT>(a, col, ra);
        if (ra + 8 < outputs) prior[2 + ci] = affine_prior_output<OutT>(a, col, ra + 8);
      }
    }
    for (int chunk = cb; chunk < ce; ++chunk, ++f) {
      // Two buffers named statically in each branch: chunk f + 1 loads into the one chunk
      // f - 1 left while chunk f is consumed. (W1-W6's `cur = r0; load(r0)` let the compiler
      // copy the fresh registers mid-chunk, and the copy waited for the load: Nsight Compute
      // put 29 % of gate_up's stall samples on that one move.)
      if ((f & 1) == 0) {
        if (!kEarly || f > 0) load_regs(r1);  // kEarly: chunk 1 is in r1 already
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
      for (int v = 1; v < kWarps; ++v) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] += red[parity][v][lane * 4 + i];
      }
      const int cols = kMulti ? 2 : 1;
#pragma unroll
      for (int ci = 0; ci < cols; ++ci) {
        const int col = 2 * t + ci;
        if (col >= x_rows || (!kMulti && t != 0)) continue;
        if constexpr (kMode == kGated) {
          const int j = tile * 8 + g;
          if (j < outputs) affine_store_output<OutT>(a, col, j, acc[ci], acc[2 + ci]);
        } else if constexpr (kMode == kRope) {
          const int j = tile * 8 + g;
          if (j < outputs) store_rope(a, col, j, acc[ci], acc[2 + ci]);
        } else {
          const int ra = tile * 16 + g;
          if (ra < outputs) affine_store_output<OutT>(a, col, ra, acc[ci], 0.0f, prior[ci]);
          if (ra + 8 < outputs) {
            affine_store_output<OutT>(a, col, ra + 8, acc[2 + ci], 0.0f, prior[2 + ci]);
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
constexpr size_t kStaticSmem = sizeof(float) * (2 * kWarps * 32 * 4 + 32 + kMaxXRows) + 1024;

size_t smem_cap() {
  const int optin = device_optin_smem();
  return std::min(kMaxSmem, static_cast<size_t>(std::max(optin, 0)) > kStaticSmem
                                ? static_cast<size_t>(optin) - kStaticSmem
                                : 0);
}

// Launch (or, with per_sm_out, only report the occupancy of) one instantiation.
template <typename ScaleT, typename OutT, int kGroup, int kMode, bool kMulti, int kDesign>
cudaError_t launch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm_out) {
  constexpr bool kPair = kMode != kSingle;
  auto* kernel = affine_gemv_mma_kernel<ScaleT, OutT, kGroup, kMode, kMulti, kDesign>;
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

template <typename ScaleT, typename OutT, int kGroup, int kDesign>
cudaError_t dispatch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm) {
  const bool pair =
      a.epilogue == GemvEpilogue::kGatedSilu || a.epilogue == GemvEpilogue::kGatedGeluTanh;
  const bool one = x_rows == 1;
  if constexpr (sizeof(OutT) == 2) {
    if (pair) {
      return one ? launch<ScaleT, OutT, kGroup, kGated, false, kDesign>(a, x_rows, stream, per_sm)
                 : launch<ScaleT, OutT, kGroup, kGated, true, kDesign>(a, x_rows, stream, per_sm);
    }
    if (a.epilogue == GemvEpilogue::kRopeKvWrite) {
      return one ? launch<ScaleT, OutT, kGroup, kRope, false, kDesign>(a, x_rows, stream, per_sm)
                 : launch<ScaleT, OutT, kGroup, kRope, true, kDesign>(a, x_rows, stream, per_sm);
    }
  }
  return one ? launch<ScaleT, OutT, kGroup, kSingle, false, kDesign>(a, x_rows, stream, per_sm)
             : launch<ScaleT, OutT, kGroup, kSingle, true, kDesign>(a, x_rows, stream, per_sm);
}

template <typename ScaleT, typename OutT, int kDesign>
cudaError_t dispatch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm) {
  return a.w.group_size == 64 ? dispatch<ScaleT, OutT, 64, kDesign>(a, x_rows, stream, per_sm)
                              : dispatch<ScaleT, OutT, 128, kDesign>(a, x_rows, stream, per_sm);
}

template <int kDesign>
cudaError_t dispatch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, int* per_sm) {
  if (a.y_f32) {
    return a.w.f16_scales ? dispatch<__half, float, kDesign>(a, x_rows, stream, per_sm)
                          : dispatch<__nv_bfloat16, float, kDesign>(a, x_rows, stream, per_sm);
  }
  return a.w.f16_scales
             ? dispatch<__half, __nv_bfloat16, kDesign>(a, x_rows, stream, per_sm)
             : dispatch<__nv_bfloat16, __nv_bfloat16, kDesign>(a, x_rows, stream, per_sm);
}

cudaError_t dispatch(const AffineGemvArgs& a, int x_rows, cudaStream_t stream, MmaDesign design,
                     int* per_sm) {
  switch (design) {
    case kMmaRegisters:
      return dispatch<kMmaRegisters>(a, x_rows, stream, per_sm);
    case kMmaRegistersEarly:
      return dispatch<kMmaRegistersEarly>(a, x_rows, stream, per_sm);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool affine_gemv_mma_supported(const AffineGemvArgs& a) {
  const AffineQuantWeight& w = a.w;
  if (w.bits != 4 || (w.group_size != 64 && w.group_size != 128) || w.k % kChunkK != 0) {
    return false;
  }
  const uintptr_t align = w.group_size == 64 ? 8 : 4;
  if (reinterpret_cast<uintptr_t>(w.scales) % align != 0 ||
      reinterpret_cast<uintptr_t>(w.biases) % align != 0 ||
      reinterpret_cast<uintptr_t>(w.packed) % 8 != 0) {
    return false;
  }
  if (a.norm_weight != nullptr && reinterpret_cast<uintptr_t>(a.norm_weight) % 16 != 0) {
    return false;
  }
  return x_bytes(1, w.k) <= smem_cap();
}

cudaError_t affine_gemv_mma(const AffineGemvArgs& args, cudaStream_t stream, MmaDesign design) {
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
    cudaError_t err = dispatch(a, std::min(batch, args.m - r0), stream, design, nullptr);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// W4's per-shape lab winners (3 blocks/SM for qkv's 384 tiles, 2 chunks ahead for the
// logits) chosen by tile count measured 410 tok/s in the product against 419 for 1 ahead at
// 2/SM everywhere (W5, paired with the register kernel each time): one design for all.
cudaError_t affine_gemv_mma(const AffineGemvArgs& args, cudaStream_t stream) {
  return affine_gemv_mma(args, stream, kMmaDefault);
}

int affine_gemv_mma_blocks_per_sm(const AffineGemvArgs& a, MmaDesign design) {
  int per_sm = 0;
  if (!affine_gemv_mma_supported(a)) return 0;
  if (dispatch(a, 1, nullptr, design, &per_sm) != cudaSuccess) return 0;
  return per_sm;
}

}  // namespace hearth::cuda::detail
