// Lab (issue 6): can one persistent kernel stream the 64-row decode step's layer GEMMs closer
// to the memory rate than one launch per GEMM? 8 layers x (qkv, o, gate_up, down) at m = 64,
// each phase reading the previous phase's output (o reads qkv's first 4096 columns, down
// gate_up's first 14336), run three ways on the same weights and buffers:
//   - cuBLASLt (GemmBf16), one call a GEMM, 32 calls replayed from one CUDA graph;
//   - src's wgmma_gemm under PDL, one launch a GEMM, the same graph;
//   - chain_kernel: one cooperative launch, one block a multiprocessor, all 32 phases.
// Each is reported against two ceilings measured in the same process: the device-to-device
// copy (read + write) and a read-only stream (read_kernel, 6-9 % above copy on the H200).
//
// chain_kernel: the blocks split every phase's (128-row weight tile, 64-wide k step)
// iterations evenly (stream-K). Two consumer warpgroups run wgmma on a ring of shared-memory
// stages (16 KB of weights + 8 KB of x); lane 0 of one producer warp (or two, taking turns)
// issues the weights, lane 0 of another the x, each with its own cursor and its own arrival
// on the stage's barrier. A phase ends with a grid barrier (an arrival counter): x waits for
// it, the weights (which no phase writes) do not (early_w), so the ring fills with the next
// phase's weights while the grid drains. A split tile's partial sums go through an f32
// workspace: by default the last block to arrive on a per-tile counter adds them in k order;
// LAB_DEFERRED=1 publishes them unfenced and lets the tile's last block add them between two
// grid barriers. Every early_w / late_w run is checked phase by phase against cuBLASLt on
// that phase's own input (bf16: within one rounding).
// Consumers keep one stage's wgmma group in flight (wait_group 1) and release it a stage late.
// Modes (one kernel instantiation each: ptxas serializes wgmmas it cannot prove
// warpgroup-uniform, C7518): early_w; late_w (the weights wait too: launch-per-GEMM inside one
// kernel); and bounds that give wrong sums: no_barrier (x never waits), no split (no
// reductions either), loads alone (no wgmma), wgmmas alone (no loads), and two probes of the
// gap between the loads alone and loads + wgmmas: the wgmmas read stage 0 whatever landed,
// or issue half the k16 slices.
// Environment: LAB_DEFERRED=1; LAB_TILED=1 (weights pre-tiled as 16 KB shared-memory images,
// one bulk copy a stage, instead of tensor-map boxes); LAB_WIDE=1 (x as wgmma's A, 128 weight
// rows as N: m64n128k16, warpgroups on alternate stages; implies LAB_DEFERRED);
// LAB_PREFETCH=<n> (weights n stages ahead pulled into L2); LAB_W_THREADS=1|2; LAB_GRID=<g>;
// LAB_SHAPE=<name> (every phase that k = 4096 shape); LAB_WAITS=1 (producer wait accounting);
// LAB_NO_COOP=1; LAB_PROFILE=<mode> (one launch, for ncu). Findings: dev/cuda/NOTES.md,
// "A persistent GEMM chain, session 20".
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemm_wgmma.cuh"
#include "kernels/cuda/sm90.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;
using namespace ::hearth::cuda::sm90;  // NOLINT(google-build-using-namespace)

constexpr int kTok = 64;  // rows (tokens): the wgmma's N
constexpr int kRegs = kTok / 2;
constexpr int kTileRows = 128;  // weight rows a tile: two consumer warpgroups of 64
constexpr int kKStep = 64;      // k a stage: one 128-byte swizzle row
constexpr int kConsumers = 256;
constexpr int kMaxWThreads = 2;                                 // weight producers (one a warp)
constexpr int kThreads = kConsumers + 32 * (kMaxWThreads + 1);  // + the producer warps
constexpr int kWBytes = kTileRows * kKStep * 2;                 // 16 KB
constexpr int kXBytes = kTok * kKStep * 2;                      // 8 KB
constexpr int kStageBytes = kWBytes + kXBytes;
constexpr int kStages = 8;                   // 192 KB
constexpr int kCombineBytes = 64 * 128 * 4;  // wide: warpgroup 1's sums, handed to warpgroup 0
constexpr size_t kSmem =
    std::max(size_t(kStages) * kStageBytes + kCombineBytes, size_t(kStages + 1) * kStageBytes) +
    1024 /* alignment */ + 256;
constexpr int kLayers = 8;
constexpr int kPhases = 4 * kLayers;

enum Mode : int {
  kEarlyW = 0,
  kLateW = 1,
  kNoBarrier = 2,
  kNoSplit = 3,
  kStreamOnly = 4,
  kComputeOnly = 5,
  // Probes of the ~20 % between the loads alone and loads + wgmmas (no barrier, no split, as
  // kNoSplit; narrow form): the wgmmas read stage 0 whatever stage just landed (the same
  // shared-memory traffic, no read of freshly written bytes), or issue half the k16 slices
  // of each stage (half the wgmma operand reads and tensor work).
  kFixedSlot = 6,
  kHalfWgmma = 7,
  // ... or x is loaded on the ring's first pass only (its later stages arrive without bytes
  // and the wgmmas read whatever x that slot held): no L2-to-shared x traffic beside the
  // weights' stream (session 26).
  kNoXLoad = 8
};

// Modes whose split tiles are not reduced (sums wrong where a tile is split).
__host__ __device__ constexpr bool no_split_mode(int mode) {
  return mode == kNoSplit || mode >= kFixedSlot;
}

struct Phase {
  Bf16* y;  // [kTok, n], row stride n
  int n;
  int ksteps;
  int counter_base;
  int64_t iters;  // tiles x ksteps
};

struct ChainParams {
  CUtensorMap w[kPhases];      // [n, k] weights, {64, 128} boxes
  CUtensorMap x[kPhases];      // [kTok, k] inputs, {64, 64} boxes
  const Bf16* tiled[kPhases];  // LAB_TILED: the weights as [tile][k step][16 KB smem image]
  Phase ph[kPhases];
  int phases;
  int grid;
  int deferred;        // split tiles reduced between two grid barriers (LAB_DEFERRED)
  int wide;            // yᵀ's transpose: x as wgmma's A, 128 weight rows as N (LAB_WIDE)
  int prefetch;        // weights this many stages ahead pulled into L2 (LAB_PREFETCH)
  int use_tiled;       // weights from tiled[] by one 16 KB bulk copy a stage (LAB_TILED)
  int w_threads;       // weight producers, 1..kMaxWThreads (LAB_W_THREADS)
  int timing;          // waits[] (LAB_WAITS=1; the clock reads cost the producer time)
  float* partials;     // [2 (phase parity)][grid][2 slots][kRegs][256]
  unsigned* counters;  // one a (phase, tile), zero between calls
  unsigned* done;      // blocks' phase arrivals, cumulative; zeroed before each launch
  uint64_t* stamps;    // [phases + 1][grid] %globaltimer: start, then each phase's end
  uint64_t* waits;     // [grid]: ns the first weight producer waited for free ring slots
};

__device__ __forceinline__ int64_t block_start(int b, int64_t iters, int grid) {
  return int64_t(b) * iters / grid;
}

__device__ __forceinline__ int block_of(int64_t i, int64_t iters, int grid) {
  int b = static_cast<int>(i * grid / iters);
  while (b + 1 < grid && block_start(b + 1, iters, grid) <= i) ++b;
  while (b > 0 && block_start(b, iters, grid) > i) --b;
  return b;
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

// The consumers' arrival at the grid barrier: after the `after`-th barrier has passed
// everywhere (so the count never runs ahead of a slow block), this block's stores are
// published to the async proxy and counted. no_barrier and the bounds count without waiting.
template <int kMode>
__device__ __forceinline__ void grid_arrive(const ChainParams& p, unsigned after, int ctid) {
  fence_proxy_async();
  consumer_sync();
  if (ctid == 0) {
    while (kMode < kNoBarrier && load_acquire(p.done) < after * unsigned(p.grid)) {
      __nanosleep(32);
    }
    fence_acq_rel_gpu();
    atomicAdd(p.done, 1u);
  }
}

// Every consumer waits until `after` grid barriers have passed (thread 0 polls), then reads
// what the other blocks published before arriving.
template <int kMode>
__device__ __forceinline__ void grid_wait(const ChainParams& p, unsigned after, int ctid) {
  if (ctid == 0) {
    while (kMode < kNoBarrier && load_acquire(p.done) < after * unsigned(p.grid)) {
      __nanosleep(32);
    }
  }
  consumer_sync();
  fence_acq_rel_gpu();
}

// One block's walk over its iterations, phase after phase (empty ranges skipped). The tile
// and k step advance by increments: one thread issues every load, and a 64-bit division
// per stage (~0.2 us of a lone thread's dependent instructions) cost a third of the stream.
struct Cursor {
  int q = 0;
  int64_t it = 0;
  int64_t end = 0;
  int ksteps = 0;
  int kb = 0;    // k step in the tile
  int row0 = 0;  // the tile's first weight row
  __device__ void enter(const ChainParams& p) {
    it = block_start(blockIdx.x, p.ph[q].iters, p.grid);
    end = block_start(blockIdx.x + 1, p.ph[q].iters, p.grid);
    ksteps = p.ph[q].ksteps;
    kb = static_cast<int>(it % ksteps);
    row0 = static_cast<int>(it / ksteps) * kTileRows;
  }
  __device__ void settle(const ChainParams& p) {
    while (q < p.phases && it >= end) {
      if (++q == p.phases) return;
      enter(p);
    }
  }
  __device__ void start(const ChainParams& p) {
    q = 0;
    enter(p);
    settle(p);
  }
  __device__ void next(const ChainParams& p) {
    ++it;
    if (++kb == ksteps) {
      kb = 0;
      row0 += kTileRows;
    }
    if (it >= end) settle(p);
  }
};

// Narrow form: warpgroup g's accumulator rows are weight rows 64g.. of the tile, its columns
// tokens (sm90::for_each_accumulator).
__device__ __forceinline__ void store_tile(const float (&d)[kRegs], int tile, int ctid,
                                           const Phase& ph) {
  const int ch0 = tile * kTileRows + (ctid >> 7) * 64;
  for_each_accumulator<kTok>(ctid & 127, [&](int i, int row, int tok) {
    if (ch0 + row < ph.n) ph.y[int64_t(tok) * ph.n + ch0 + row] = __float2bfloat16(d[i]);
  });
}

// Wide consumers: y = x · wᵀ with x as wgmma's A (64 tokens, K-major) and a stage's 128
// weight rows as B (N = 128, K-major): m64n128k16, twice the N of the narrow form's m64n64k16
// (the narrow form's wgmmas alone ran no faster than the loads, S20-W12). Warpgroup g takes
// the stages of parity g (stage counter over the whole walk), so both accumulate the same
// tile over alternate k steps; at a segment's end warpgroup 1 hands its sums to warpgroup 0
// through shared memory, which adds them (its own first) and stores y or a split tile's
// partial. Split tiles are reduced between two grid barriers (the deferred scheme), every
// segment published, the tile's last block adding them in k order.
__device__ __forceinline__ void store_wide(const float (&d)[64], int tile, int tid,
                                           const Phase& ph) {
  // Rows are tokens, columns weight rows; a thread's columns come in pairs (c = 0, 1).
  for_each_accumulator<128>(tid, [&](int i, int tok, int col) {
    const int ch = tile * kTileRows + col;
    if ((i & 1) == 0 && ch + 1 < ph.n) {
      *reinterpret_cast<__nv_bfloat162*>(ph.y + int64_t(tok) * ph.n + ch) =
          __floats2bfloat162_rn(d[i], d[i + 1]);
    }
  });
}

template <int kMode>
__device__ __forceinline__ void consume_wide(const ChainParams& p, uint8_t* smem, float* combine,
                                             uint64_t* full, uint64_t* empty) {
  const int ctid = threadIdx.x;
  const int g = ctid >> 7;
  const int tid = ctid & 127;
  auto weights = [&](int s) { return smem + size_t(s) * kStageBytes; };
  auto tokens = [&](int s) { return smem + size_t(s) * kStageBytes + kWBytes; };
  if (ctid == 0) p.stamps[blockIdx.x] = global_ns();
  float acc[64];
  int s = 0;
  uint32_t parity = 0;
  int64_t n = 0;  // stages walked (both warpgroups count them all)
  int reduce_tile = -1;
  for (int q = 0; q < p.phases; ++q) {
    const Phase& ph = p.ph[q];
    const int64_t it0 = block_start(blockIdx.x, ph.iters, p.grid);
    const int64_t it1 = block_start(blockIdx.x + 1, ph.iters, p.grid);
    float* part_base = p.partials + size_t(q & 1) * p.grid * 2 * 8192;
    for (int64_t it = it0; it < it1;) {
      const int tile = static_cast<int>(it / ph.ksteps);
      const int kb0 = static_cast<int>(it % ph.ksteps);
      const int kb1 = static_cast<int>(kb0 + (it1 - it) < ph.ksteps ? kb0 + (it1 - it) : ph.ksteps);
      const bool first_segment = it == it0;
      bool touched = false;
      for (int kb = kb0; kb < kb1; ++kb, ++n) {
        const int slot = s;
        const uint32_t par = parity;
        if (++s == kStages) {
          s = 0;
          parity ^= 1;
        }
        if ((n & 1) != g) continue;
        if constexpr (kMode != kComputeOnly) mbar_wait(&full[slot], par);
        if constexpr (kMode != kStreamOnly) {
          wgmma_fence();
          const uint64_t a = smem_desc(tokens(slot));
          const uint64_t b = smem_desc(weights(slot));
#pragma unroll
          for (int j = 0; j < kKStep / 16; ++j) {
            wgmma_n128(acc, a + 2 * j, b + 2 * j, touched || j > 0);
          }
          wgmma_commit();
          wgmma_wait_all();
          fence_regs(acc);
        }
        touched = true;
        __syncwarp();
        if (kMode != kComputeOnly && (ctid & 31) == 0) mbar_arrive(&empty[slot]);
      }
      it += kb1 - kb0;
      if (!touched) {
#pragma unroll
        for (int r = 0; r < 64; ++r) acc[r] = 0.0f;
      }
      if (g == 1) {
#pragma unroll
        for (int r = 0; r < 64; ++r) combine[r * 128 + tid] = acc[r];
      }
      consumer_sync();
      if (g == 0) {
#pragma unroll
        for (int r = 0; r < 64; ++r) acc[r] += combine[r * 128 + tid];
        const bool split =
            (kb0 != 0 || kb1 != ph.ksteps) && !no_split_mode(kMode) && kMode != kComputeOnly;
        if (kMode == kStreamOnly) {
        } else if (split) {
          const int slot = first_segment ? 0 : 1;
          float* mine = part_base + (size_t(blockIdx.x) * 2 + slot) * 8192;
#pragma unroll
          for (int r = 0; r < 64; ++r) __stcg(mine + r * 128 + tid, acc[r]);
        } else {
          store_wide(acc, tile, tid, ph);
        }
      }
      // Both warpgroups track the tile to reduce: the barriers below are theirs together.
      if ((kb0 != 0 || kb1 != ph.ksteps) && kb1 == ph.ksteps && kMode < kNoSplit) {
        reduce_tile = tile;
      }
      consumer_sync();  // combine is rewritten by the next segment
    }
    const unsigned base = unsigned(q) * 2;
    if (ctid == 0) p.stamps[size_t(q + 1) * p.grid + blockIdx.x] = global_ns();
    grid_arrive<kMode>(p, base, ctid);
    if (reduce_tile >= 0) {
      grid_wait<kMode>(p, base + 1, ctid);
      if (g == 0) {
        const int64_t tile_first = int64_t(reduce_tile) * ph.ksteps;
        const int b_lo = block_of(tile_first, ph.iters, p.grid);
#pragma unroll
        for (int r = 0; r < 64; ++r) acc[r] = 0.0f;
        for (int c = b_lo; c <= static_cast<int>(blockIdx.x); ++c) {
          const int cs = block_start(c, ph.iters, p.grid) >= tile_first ? 0 : 1;
          const float* part = part_base + (size_t(c) * 2 + cs) * 8192;
#pragma unroll
          for (int r = 0; r < 64; ++r) acc[r] += __ldcg(part + r * 128 + tid);
        }
        store_wide(acc, reduce_tile, tid, ph);
      }
      reduce_tile = -1;
    }
    grid_arrive<kMode>(p, base + 1, ctid);
  }
}

template <int kMode, bool kWide>
__global__ void __launch_bounds__(kThreads, 1) chain_kernel(const __grid_constant__ ChainParams p) {
  constexpr int kRing = kWide ? kStages : kStages + 1;  // narrow: no combine buffer, 9 stages
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  float* combine = reinterpret_cast<float*>(smem + size_t(kRing) * kStageBytes);
  uint64_t* full =
      reinterpret_cast<uint64_t*>(smem + size_t(kRing) * kStageBytes + (kWide ? kCombineBytes : 0));
  uint64_t* empty = full + kRing;
  int* last_flag = reinterpret_cast<int*>(empty + kRing);
  auto weights = [&](int s) { return smem + size_t(s) * kStageBytes; };
  auto tokens = [&](int s) { return smem + size_t(s) * kStageBytes + kWBytes; };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kRing; ++s) {
      mbar_init(&full[s], 2);  // the weights' producer and x's
      mbar_init(&empty[s], kWide ? 4 : kConsumers / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (threadIdx.x >= kConsumers) {
    // Producers, lane 0 of warps 8.. : w_threads threads take turns at the stages' weights,
    // one more issues every stage's x. Each walks the whole stage sequence with its own
    // cursor (increments only) and arrives on the stage's full barrier with its own bytes.
    // Weights never wait for the grid barrier (early_w) unless late_w; x always does
    // (no_barrier: never).
    const int warp = (threadIdx.x - kConsumers) >> 5;
    if ((threadIdx.x & 31) != 0 || warp > p.w_threads || kMode == kComputeOnly) return;
    const bool x_role = warp == p.w_threads;
    const uint64_t policy = x_role ? policy_evict_last() : policy_evict_first();
    Cursor c;
    c.start(p);
    Cursor ahead;  // prefetch: the stage p.prefetch stages past c, pulled into L2
    ahead.start(p);
    for (int i = 0; i < p.prefetch && ahead.q < p.phases; ++i) ahead.next(p);
    int slot = 0;
    uint32_t pass = 0;
    int turn = 0;
    int passed = 0;
    uint64_t empty_ns = 0;
    const bool wait_barrier = x_role ? kMode < kNoBarrier : kMode == kLateW;
    while (c.q < p.phases) {
      if (x_role || turn == warp) {
        if (pass > 0) {
          const uint64_t t0 = p.timing ? global_ns() : 0;
          mbar_wait(&empty[slot], (pass - 1) & 1);
          if (p.timing) empty_ns += global_ns() - t0;
        }
        if (wait_barrier && c.q > passed) {
          const unsigned per_phase = p.deferred ? 2u : 1u;
          while ((passed = static_cast<int>(load_acquire(p.done) / (per_phase * p.grid))) < c.q) {
            __nanosleep(32);
          }
          if (x_role) fence_proxy_async();  // the previous phase's stores, for the TMA read
        }
        if (x_role && kMode == kNoXLoad && pass > 0) {
          mbar_arrive(&full[slot]);
        } else if (x_role) {
          mbar_expect_tx(&full[slot], kXBytes);
          tma_load(tokens(slot), &p.x[c.q], &full[slot], c.kb * kKStep, 0, policy);
        } else {
          mbar_expect_tx(&full[slot], kWBytes);
          if (p.use_tiled) {
            const Bf16* src =
                p.tiled[c.q] + (int64_t(c.row0 / kTileRows) * c.ksteps + c.kb) * (kWBytes / 2);
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                " [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(weights(slot))),
                "l"(src), "r"(kWBytes), "r"(smem_addr(&full[slot])), "l"(policy)
                : "memory");
          } else {
            tma_load(weights(slot), &p.w[c.q], &full[slot], c.kb * kKStep, c.row0, policy);
          }
          if (p.prefetch > 0 && ahead.q < p.phases) {
            if (p.use_tiled) {
              const Bf16* src =
                  p.tiled[ahead.q] +
                  (int64_t(ahead.row0 / kTileRows) * ahead.ksteps + ahead.kb) * (kWBytes / 2);
              asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(kWBytes)
                           : "memory");
            } else {
              asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];" ::"l"(
                               reinterpret_cast<uint64_t>(&p.w[ahead.q])),
                           "r"(ahead.kb * kKStep), "r"(ahead.row0)
                           : "memory");
            }
          }
        }
      }
      c.next(p);
      if (p.prefetch > 0 && ahead.q < p.phases) ahead.next(p);
      if (++slot == kRing) {
        slot = 0;
        ++pass;
      }
      if (++turn == p.w_threads) turn = 0;
    }
    if (warp == 0) p.waits[blockIdx.x] = empty_ns;
    return;
  }

  if constexpr (kWide) {
    consume_wide<kMode>(p, smem, combine, full, empty);
    return;
  }
  // Consumers: warpgroup g multiplies weight rows [64g, 64g + 64) of each stage.
  const int ctid = threadIdx.x;
  const int g = ctid >> 7;
  if (ctid == 0) p.stamps[blockIdx.x] = global_ns();
  float acc[kRegs];
  float own[kRegs];      // deferred: the sums of the split tile this block reduces
  int reduce_tile = -1;  // deferred: that tile
  int s = 0;
  uint32_t parity = 0;
  for (int q = 0; q < p.phases; ++q) {
    const Phase& ph = p.ph[q];
    const int64_t it0 = block_start(blockIdx.x, ph.iters, p.grid);
    const int64_t it1 = block_start(blockIdx.x + 1, ph.iters, p.grid);
    for (int64_t it = it0; it < it1;) {
      const int tile = static_cast<int>(it / ph.ksteps);
      const int kb0 = static_cast<int>(it % ph.ksteps);
      const int kb1 = static_cast<int>(kb0 + (it1 - it) < ph.ksteps ? kb0 + (it1 - it) : ph.ksteps);
      const bool first_segment = it == it0;
      // One stage's wgmmas stay in flight while the next stage's issue (wait_group 1); a
      // stage is released once its group has finished, the segment's last at its end.
      auto release = [&](int slot) {
        __syncwarp();
        if (kMode != kComputeOnly && (ctid & 31) == 0) mbar_arrive(&empty[slot]);
      };
      int held = -1;
      for (int kb = kb0; kb < kb1; ++kb) {
        if constexpr (kMode != kComputeOnly) mbar_wait(&full[s], parity);
        if constexpr (kMode != kStreamOnly) {
          wgmma_fence();
          const int read = kMode == kFixedSlot ? 0 : s;
          const uint64_t a = smem_desc(weights(read) + g * (kWBytes / 2));
          const uint64_t b = smem_desc(tokens(read));
          constexpr int kSlices = kMode == kHalfWgmma ? kKStep / 32 : kKStep / 16;
#pragma unroll
          for (int j = 0; j < kSlices; ++j) {
            wgmma_n64(acc, a + 2 * j, b + 2 * j, kb > kb0 || j > 0);
          }
          wgmma_commit();
          wgmma_wait<1>();
        }
        if (held >= 0) release(held);
        held = s;
        if (++s == kRing) {
          s = 0;
          parity ^= 1;
        }
      }
      if constexpr (kMode != kStreamOnly) {
        wgmma_wait_all();
        fence_regs(acc);
      }
      release(held);
      it += kb1 - kb0;
      if (kMode == kStreamOnly) continue;
      const bool split =
          (kb0 != 0 || kb1 != ph.ksteps) && !no_split_mode(kMode) && kMode != kComputeOnly;
      if (split && p.deferred) {
        // Deferred: the block holding the tile's last k step keeps its sums and adds the
        // others' after barrier A; every other segment is published, without a fence.
        if (kb1 == ph.ksteps) {
#pragma unroll
          for (int r = 0; r < kRegs; ++r) own[r] = acc[r];
          reduce_tile = tile;
        } else {
          const int slot = first_segment ? 0 : 1;
          float* part_base = p.partials + size_t(q & 1) * p.grid * 2 * kRegs * kConsumers;
          float* mine = part_base + (size_t(blockIdx.x) * 2 + slot) * kRegs * kConsumers;
#pragma unroll
          for (int r = 0; r < kRegs; ++r) __stcg(mine + r * kConsumers + ctid, acc[r]);
        }
        continue;
      }
      if (split) {
        // A split tile: publish this block's partial sums; the last block to arrive adds
        // every segment in k order and writes y.
        float* part_base = p.partials + size_t(q & 1) * p.grid * 2 * kRegs * kConsumers;
        const int64_t tile_first = int64_t(tile) * ph.ksteps;
        const bool summed = reduce_split_tile<kRegs, kConsumers>(
            acc, part_base, first_segment ? 0 : 1, p.counters + ph.counter_base + tile,
            block_of(tile_first, ph.iters, p.grid),
            block_of(tile_first + ph.ksteps - 1, ph.iters, p.grid), ctid, last_flag, consumer_sync,
            [&](int c) { return block_start(c, ph.iters, p.grid) >= tile_first ? 0 : 1; });
        if (!summed) continue;
      }
      store_tile(acc, tile, ctid, ph);
    }
    // The phase's streaming is done: arrive at the grid barrier (after the barrier before
    // has passed everywhere, so the count never runs ahead of a slow block). Deferred: two
    // barriers a phase, A (partials published) and B (y complete), the reduction between.
    const unsigned per_phase = p.deferred ? 2u : 1u;
    const unsigned base = unsigned(q) * per_phase;  // barriers passed before this phase
    if (ctid == 0) {
      p.stamps[size_t(q + 1) * p.grid + blockIdx.x] = global_ns();
    }
    grid_arrive<kMode>(p, base, ctid);
    if (!p.deferred) continue;
    if (reduce_tile >= 0) {
      grid_wait<kMode>(p, base + 1, ctid);
      const int64_t tile_first = int64_t(reduce_tile) * ph.ksteps;
      const int b_lo = block_of(tile_first, ph.iters, p.grid);
      const float* part_base = p.partials + size_t(q & 1) * p.grid * 2 * kRegs * kConsumers;
      // Summed in registers of its own: non-wgmma writes to acc between wgmma pipeline
      // stages make ptxas serialize the wgmmas (C7515).
      float sum[kRegs];
#pragma unroll
      for (int r = 0; r < kRegs; ++r) sum[r] = 0.0f;
      for (int c = b_lo; c < static_cast<int>(blockIdx.x); ++c) {
        const int cs = block_start(c, ph.iters, p.grid) >= tile_first ? 0 : 1;
        const float* part = part_base + (size_t(c) * 2 + cs) * kRegs * kConsumers;
#pragma unroll
        for (int r = 0; r < kRegs; ++r) sum[r] += __ldcg(part + r * kConsumers + ctid);
      }
#pragma unroll
      for (int r = 0; r < kRegs; ++r) sum[r] += own[r];
      store_tile(sum, reduce_tile, ctid, ph);
      reduce_tile = -1;
    }
    grid_arrive<kMode>(p, base + 1, ctid);
  }
}

// w [n, k] -> [tile][k step][128 rows x 128 bytes]: each 16 KB block is the shared-memory
// image a 128-byte-swizzle TMA load of that box writes (16-byte unit u of row r lands at
// unit u ^ (r % 8)), so one contiguous bulk copy replaces the box's 128 strided rows.
__global__ void pretile_kernel(const Bf16* w, int n, int k, Bf16* out) {
  const int ksteps = k / kKStep;
  const int64_t block = blockIdx.x;  // tile * ksteps + k step
  const int tile = static_cast<int>(block / ksteps);
  const int kb = static_cast<int>(block % ksteps);
  for (int u = threadIdx.x; u < kTileRows * 8; u += blockDim.x) {
    const int r = u / 8;
    const int c = u % 8;
    const int row = tile * kTileRows + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < n) v = *reinterpret_cast<const uint4*>(w + int64_t(row) * k + kb * kKStep + c * 8);
    *reinterpret_cast<uint4*>(out + block * (kWBytes / 2) + r * 64 + ((c ^ (r & 7)) * 8)) = v;
  }
}

using Kernel = void (*)(ChainParams);

// chain_kernel's instantiations, [mode][wide].
template <int... kModes>
std::array<std::array<Kernel, 2>, sizeof...(kModes)> kernel_table(
    std::integer_sequence<int, kModes...>) {
  return {{{chain_kernel<kModes, false>, chain_kernel<kModes, true>}...}};
}

struct Shape {
  const char* name;
  int n;
  int k;
};
constexpr Shape kShapes[4] = {
    {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};

// Phase q's input: the previous phase's output (its first k columns), x0 for the first.
struct Buffers {
  Bf16* x0 = nullptr;
  std::vector<Bf16*> w;  // [kPhases]
  std::vector<Bf16*> y;  // [kPhases]
  const Bf16* input(int q) const { return q == 0 ? x0 : y[q - 1]; }
  std::vector<Shape> shape;  // [kPhases]
  int64_t ld_input(int q) const { return q == 0 ? 4096 : shape[q - 1].n; }
};

double graph_or_stream_us(cudaStream_t st, const std::function<void()>& body) {
  try {
    const CapturedGraph graph(st, body);
    return median_ms(
               st, [&](int) { graph.launch(); }, 15, 3) *
           1e3;
  } catch (const std::exception& e) {
    std::printf("  (graph capture failed: %s; timing stream launches)\n", e.what());
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(st, &partial);  // ends a capture the failure left open
    if (partial != nullptr) cudaGraphDestroy(partial);
    cudaGetLastError();
    return median_ms(
               st, [&](int) { body(); }, 15, 3) *
           1e3;
  }
}

void run() {
  auto ctx_or = DeviceContext::create({});
  CK(ctx_or.status());
  DeviceContext& ctx = **ctx_or;
  cudaStream_t st = ctx.stream();
  const int sm = ctx.properties().multiProcessorCount;
  const double copy_bw = measure_copy_bandwidth(st);
  const double read_bw = measure_read_bandwidth(st, sm);

  Buffers buf;
  // LAB_SHAPE=<name>: every phase that shape (k = 4096 shapes only), else the layer's four.
  const char* only = std::getenv("LAB_SHAPE");
  for (int q = 0; q < kPhases; ++q) {
    buf.shape.push_back(kShapes[q % 4]);
    for (const Shape& sh : kShapes) {
      if (only != nullptr && std::strcmp(only, sh.name) == 0 && sh.k == 4096) buf.shape[q] = sh;
    }
  }
  size_t layer_bytes = 0;
  for (int q = 0; q < 4; ++q) layer_bytes += size_t(buf.shape[q].n) * buf.shape[q].k * 2;
  CK(cudaMalloc(&buf.x0, size_t(kTok) * 4096 * 2));
  CK(fill_random_bf16(buf.x0, size_t(kTok) * 4096, 11, 1.0f, st));
  buf.w.resize(kPhases);
  buf.y.resize(kPhases);
  std::vector<Bf16*> y_ref(kPhases);
  for (int q = 0; q < kPhases; ++q) {
    const Shape& s = buf.shape[q];
    const size_t n = size_t(s.n) * s.k;
    CK(cudaMalloc(&buf.w[q], n * 2));
    // Uniform in +-sqrt(3/k): unit variance in, unit variance out, through all 32 phases.
    CK(fill_random_bf16(buf.w[q], n, 500 + q, std::sqrt(3.0f / s.k), st));
    CK(cudaMalloc(&buf.y[q], size_t(kTok) * s.n * 2));
    CK(cudaMalloc(&y_ref[q], size_t(kTok) * s.n * 2));
  }
  const bool use_tiled = std::getenv("LAB_TILED") != nullptr;
  std::vector<Bf16*> tiled(kPhases, nullptr);
  if (use_tiled) {
    for (int q = 0; q < kPhases; ++q) {
      const Shape& s = buf.shape[q];
      const int tiles = (s.n + kTileRows - 1) / kTileRows;
      CK(cudaMalloc(&tiled[q], size_t(tiles) * (s.k / kKStep) * kWBytes));
      pretile_kernel<<<tiles*(s.k / kKStep), 256, 0, st>>>(buf.w[q], s.n, s.k, tiled[q]);
      CK(cudaGetLastError());
    }
  }
  GemmBf16Options cublas_only;
  cublas_only.wgmma = false;
  GemmBf16 gemm(ctx, cublas_only);
  auto cublas_phase = [&](int q, const Bf16* x, int64_t ldx, Bf16* y) {
    const Shape& s = buf.shape[q];
    GemmShape g{kTok, s.n, s.k, ldx, s.k, s.n, GemmOut::kBf16, false};
    CK(gemm.run(g, x, buf.w[q], y));
  };

  // Workspace shared by wgmma_gemm and chain_kernel.
  float* partials = nullptr;
  unsigned* counters = nullptr;
  unsigned* done = nullptr;
  uint64_t* stamps = nullptr;
  uint64_t* waits = nullptr;
  CK(cudaMalloc(&stamps, size_t(kPhases + 1) * sm * 8));
  CK(cudaMalloc(&waits, size_t(sm) * 8));
  CK(cudaMalloc(&partials, size_t(32) << 20));
  CK(cudaMalloc(&counters, size_t(1) << 16));
  CK(cudaMalloc(&done, 4));
  CK(cudaMemset(counters, 0, size_t(1) << 16));

  const double floor_us = layer_bytes / copy_bw * 1e6;
  const double read_floor_us = layer_bytes / read_bw * 1e6;
  auto report = [&](const char* name, double us_total) {
    const double us = us_total / kLayers;
    std::printf("  %-34s %7.1f us a layer  %5.1f%% of copy  %5.1f%% of read-only\n", name, us,
                100.0 * floor_us / us, 100.0 * read_floor_us / us);
    std::fflush(stdout);
  };
  std::printf(
      "\n== 8 layers x (qkv, o, gate_up, down), m = %d, %.1f MB a layer, copy floor %.1f us\n",
      kTok, layer_bytes / 1e6, floor_us);

  // cuBLASLt, a launch a GEMM.
  report("cuBLASLt", graph_or_stream_us(st, [&] {
           for (int q = 0; q < kPhases; ++q) {
             cublas_phase(q, q == 0 ? buf.x0 : y_ref[q - 1], buf.ld_input(q), y_ref[q]);
           }
         }));
  // src's wgmma_gemm under PDL, a launch a GEMM.
  report("wgmma_gemm + pdl", graph_or_stream_us(st, [&] {
           for (int q = 0; q < kPhases; ++q) {
             const Shape& s = buf.shape[q];
             WgmmaGemmArgs a;
             a.x = buf.input(q);
             a.ldx = buf.ld_input(q);
             a.w = buf.w[q];
             a.ldw = s.k;
             a.y = buf.y[q];
             a.ldy = s.n;
             a.m = kTok;
             a.n = s.n;
             a.k = s.k;
             a.sm_count = sm;
             a.pdl = true;
             a.partials = partials;
             a.counters = counters;
             CK(wgmma_gemm(a, st));
           }
         }));

  // chain_kernel.
  EncodeTiled fn = encoder();
  if (fn == nullptr) throw std::runtime_error("no cuTensorMapEncodeTiled");
  ChainParams prm{};
  int counter_base = 0;
  for (int q = 0; q < kPhases; ++q) {
    const Shape& s = buf.shape[q];
    if (!encode(fn, &prm.w[q], buf.w[q], s.n, s.k, s.k, kTileRows) ||
        !encode(fn, &prm.x[q], buf.input(q), kTok, s.k, buf.ld_input(q), kTok)) {
      throw std::runtime_error("tensor map encode failed");
    }
    prm.tiled[q] = tiled[q];
    Phase& ph = prm.ph[q];
    ph.y = buf.y[q];
    ph.n = s.n;
    ph.ksteps = s.k / kKStep;
    ph.counter_base = counter_base;
    const int tiles = (s.n + kTileRows - 1) / kTileRows;
    ph.iters = int64_t(tiles) * ph.ksteps;
    counter_base += tiles;
  }
  prm.phases = kPhases;
  const char* grid_env = std::getenv("LAB_GRID");  // fewer blocks than multiprocessors
  prm.grid = grid_env != nullptr ? std::min(sm, std::max(1, std::atoi(grid_env))) : sm;
  prm.partials = partials;
  prm.counters = counters;
  prm.done = done;
  prm.timing = std::getenv("LAB_WAITS") != nullptr ? 1 : 0;
  prm.deferred = std::getenv("LAB_DEFERRED") != nullptr ? 1 : 0;
  prm.use_tiled = use_tiled ? 1 : 0;
  prm.prefetch =
      std::getenv("LAB_PREFETCH") != nullptr ? std::atoi(std::getenv("LAB_PREFETCH")) : 0;
  prm.wide = std::getenv("LAB_WIDE") != nullptr ? 1 : 0;
  if (prm.wide) prm.deferred = 1;  // the wide form reduces split tiles between barriers only
  const char* wt = std::getenv("LAB_W_THREADS");
  prm.w_threads = wt != nullptr ? std::min(kMaxWThreads, std::max(1, std::atoi(wt))) : 1;
  prm.stamps = stamps;
  prm.waits = waits;
  // One instantiation a (mode, form): no runtime branch near the wgmmas (ptxas serializes
  // wgmmas in a path it cannot prove warpgroup-uniform, C7518).
  const auto kernels =
      kernel_table(std::integer_sequence<int, kEarlyW, kLateW, kNoBarrier, kNoSplit, kStreamOnly,
                                         kComputeOnly, kFixedSlot, kHalfWgmma, kNoXLoad>());
  auto kernel_for = [&](int mode) { return kernels[mode][prm.wide]; };
  for (int mode = kEarlyW; mode <= kNoXLoad; ++mode) {
    CK(cudaFuncSetAttribute(kernel_for(mode), cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(kSmem)));
  }
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(kEarlyW), kThreads, kSmem));
  std::printf(
      "  chain_kernel: %d block(s) a multiprocessor, grid %d, %zu B of parameters, %d weight "
      "producer(s)%s%s%s\n",
      per_sm, prm.grid, sizeof(ChainParams), prm.w_threads,
      prm.deferred ? ", split tiles reduced between two barriers" : "",
      prm.use_tiled ? ", tiled weights (one bulk copy a stage)" : "",
      prm.wide ? ", wide (m64n128k16, x as A)" : "");
  if (prm.prefetch > 0) std::printf("  L2 prefetch %d stages ahead of the ring\n", prm.prefetch);
  auto launch_chain = [&](int mode) {
    CK(cudaMemsetAsync(done, 0, 4, st));
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.gridDim = dim3(prm.grid);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = std::getenv("LAB_NO_COOP") != nullptr ? 0 : 1;
    CK(cudaLaunchKernelEx(&cfg, kernel_for(mode), prm));
  };
  const char* names[9] = {
      "chain_kernel early_w",
      "chain_kernel late_w",
      "chain_kernel no_barrier (races)",
      "chain_kernel no_barrier, no split (wrong sums)",
      "chain_kernel loads alone (no wgmma)",
      "chain_kernel wgmmas alone (no loads)",
      "chain_kernel no split, wgmmas read stage 0 (wrong sums)",
      "chain_kernel no split, half the k16 slices (wrong sums)",
      "chain_kernel no split, x loaded on the ring's first pass only (wrong sums)"};
  // Per phase kind (layers 1..7): the phase's span = its last block's end - the previous
  // phase's last end; the spread = its last block's end - its first block's end.
  auto phase_profile = [&](int mode) {
    launch_chain(mode);
    CK(cudaStreamSynchronize(st));
    std::vector<uint64_t> h(size_t(kPhases + 1) * prm.grid);
    CK(cudaMemcpy(h.data(), stamps, h.size() * 8, cudaMemcpyDeviceToHost));
    std::string line;
    for (int kind = 0; kind < 4; ++kind) {
      double span = 0;
      double spread = 0;
      for (int l = 1; l < kLayers; ++l) {
        const int q = 4 * l + kind;
        auto row = [&](int r) {
          return std::vector<uint64_t>(h.begin() + size_t(r) * prm.grid,
                                       h.begin() + size_t(r + 1) * prm.grid);
        };
        const auto prev = row(q);  // row q holds phase q-1's ends
        const auto cur = row(q + 1);
        const uint64_t prev_last = *std::max_element(prev.begin(), prev.end());
        const uint64_t last = *std::max_element(cur.begin(), cur.end());
        const uint64_t first = *std::min_element(cur.begin(), cur.end());
        span += double(last - prev_last) / 1e3;
        spread += double(last - first) / 1e3;
      }
      char text[128];
      std::snprintf(text, sizeof(text), " | %s %.1f us (spread %.1f)", buf.shape[kind].name,
                    span / (kLayers - 1), spread / (kLayers - 1));
      line += text;
    }
    std::printf("    phases:%s\n", line.c_str());
    if (!prm.timing) return;
    std::vector<uint64_t> w(static_cast<size_t>(prm.grid));
    CK(cudaMemcpy(w.data(), waits, w.size() * 8, cudaMemcpyDeviceToHost));
    double empty_us = 0;
    for (uint64_t ns : w) empty_us += ns / 1e3 / prm.grid;
    std::printf("    the weights' producer waited %.1f us a block for free slots (whole launch)\n",
                empty_us);
  };
  if (const char* profile = std::getenv("LAB_PROFILE")) {
    // One launch in that mode, nothing else (for a profiler).
    launch_chain(std::atoi(profile));
    CK(cudaStreamSynchronize(st));
    std::printf("  profiled one launch in mode %d\n", std::atoi(profile));
    return;
  }
  for (int mode : {kEarlyW, kLateW, kNoBarrier, kNoSplit, kStreamOnly, kComputeOnly, kFixedSlot,
                   kHalfWgmma, kNoXLoad, kEarlyW}) {
    try {
      if (mode < kNoBarrier) {
        // Check every phase against cuBLASLt on that phase's own input.
        for (int q = 0; q < kPhases; ++q) {
          CK(cudaMemsetAsync(buf.y[q], 0, size_t(kTok) * buf.shape[q].n * 2, st));
        }
        launch_chain(mode);
        CK(cudaStreamSynchronize(st));
        double worst = 0;
        int worst_q = 0;
        for (int q = 0; q < kPhases; ++q) {
          const size_t count = size_t(kTok) * buf.shape[q].n;
          cublas_phase(q, buf.input(q), buf.ld_input(q), y_ref[q]);
          CK(cudaStreamSynchronize(st));
          const double r =
              check_ratio(to_host_bf16(buf.y[q], count), to_host_bf16(y_ref[q], count), false);
          if (r > worst) {
            worst = r;
            worst_q = q;
          }
        }
        std::printf("  %s check: %s (worst %.2f of tolerance, phase %d)\n", names[mode],
                    worst <= 1 ? "ok" : "FAIL", worst, worst_q);
      }
      report(names[mode], graph_or_stream_us(st, [&] { launch_chain(mode); }));
      phase_profile(mode);
    } catch (const std::exception& e) {
      std::printf("  %s: ERROR %s\n", names[mode], e.what());
      CK(cudaDeviceSynchronize());
    }
  }
  for (int q = 0; q < kPhases; ++q) {
    if (tiled[q] != nullptr) CK(cudaFree(tiled[q]));
    CK(cudaFree(buf.w[q]));
    CK(cudaFree(buf.y[q]));
    CK(cudaFree(y_ref[q]));
  }
  CK(cudaFree(buf.x0));
  CK(cudaFree(partials));
  CK(cudaFree(counters));
  CK(cudaFree(done));
  CK(cudaFree(stamps));
  CK(cudaFree(waits));
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout's kill
  try {
    hearth::cuda::dev::run();
  } catch (const std::exception& e) {
    std::printf("lab_chain: ERROR %s\n", e.what());
    return 1;
  }
  return 0;
}
