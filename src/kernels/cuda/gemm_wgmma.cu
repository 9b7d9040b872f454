// Hopper bf16 GEMM for batched decode: wgmma on TMA-fed shared-memory stages, stream-K over
// (128-row weight tile, 64-wide k step) iterations. See gemm_wgmma.cuh.
#include "kernels/cuda/gemm_wgmma.cuh"

#include <algorithm>

#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/sm90.cuh"

namespace hearth::cuda {
namespace {

using Bf16 = __nv_bfloat16;
using namespace ::hearth::cuda::sm90;  // NOLINT(google-build-using-namespace)

constexpr int kTileRows = 128;             // weight rows a tile (two warpgroups of 64)
constexpr int kKStep = 64;                 // k a stage: 128 bytes of bf16, one swizzle row
constexpr int kConsumers = 256;            // two consumer warpgroups
constexpr int kThreads = kConsumers + 64;  // + two producer warps (weights, x)
constexpr int kWeightStageBytes = kTileRows * kKStep * 2;  // 16 KB
constexpr size_t kSmemLimit = 227 * 1024;

__host__ __device__ constexpr int stage_bytes(int tokens) {
  return kWeightStageBytes + tokens * kKStep * 2;
}
__host__ __device__ constexpr int stages_for(int tokens) {
  const int fit = static_cast<int>((kSmemLimit - 2048) / stage_bytes(tokens));
  return fit < 12 ? fit : 12;
}
constexpr size_t smem_for(int tokens) {
  return size_t(stages_for(tokens)) * stage_bytes(tokens) + 1024 /* alignment */ +
         256 /* barriers + flag */;
}

struct Params {
  void* y;
  int64_t ldy;
  int m;
  int n;
  int ksteps;     // k steps a tile
  int64_t iters;  // tiles x ksteps
  int grid;
  bool y_f32;
  bool accumulate;
  float* partials;  // [grid][2][regs][256]
  unsigned* counters;
  int cluster;  // > 1: clusters of this many blocks split each tile's k steps evenly and sum
                // their partials through distributed shared memory (no workspace)
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// First iteration of block b: iterations are split evenly, in order (in cluster mode, block
// b is rank b % cluster of tile b / cluster's cluster).
__device__ __forceinline__ int64_t block_start(int b, const Params& p) {
  if (p.cluster > 1) {
    return int64_t(b / p.cluster) * p.ksteps + int64_t(b % p.cluster) * p.ksteps / p.cluster;
  }
  return int64_t(b) * p.iters / p.grid;
}

// Every thread of every block of the cluster (release, then acquire: shared-memory writes
// before it are visible to the cluster's blocks after it).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Block `rank`'s copy of this block's shared-memory address, in the cluster's window.
__device__ __forceinline__ uint32_t cluster_addr(uint32_t local, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

__device__ __forceinline__ float cluster_load(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// The block whose range holds iteration i.
__device__ __forceinline__ int block_of(int64_t i, const Params& p) {
  int b = static_cast<int>(i * p.grid / p.iters);
  while (b + 1 < p.grid && block_start(b + 1, p) <= i) ++b;
  while (b > 0 && block_start(b, p) > i) --b;
  return b;
}

__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

// Writes a finished tile's sums: warpgroup g's accumulator rows are weight rows (channels)
// 64g.. of the tile, its columns tokens (sm90::for_each_accumulator).
template <int kTok>
__device__ __forceinline__ void store_tile(const float (&d)[kTok / 2], int tile, int ctid,
                                           const Params& p) {
  const int ch0 = tile * kTileRows + (ctid >> 7) * 64;
  for_each_accumulator<kTok>(ctid & 127, [&](int i, int row, int tok) {
    const int ch = ch0 + row;
    if (tok >= p.m || ch >= p.n) return;
    float v = d[i];
    const int64_t at = tok * p.ldy + ch;
    if (p.y_f32) {
      float* y = static_cast<float*>(p.y) + at;
      *y = p.accumulate ? v + *y : v;
    } else {
      Bf16* y = static_cast<Bf16*>(p.y) + at;
      if (p.accumulate) v += __bfloat162float(*y);
      *y = __float2bfloat16(v);
    }
  });
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Grid: blocks split the iterations evenly; block: 2 consumer warpgroups + 2 producer warps.
// The body exists only in the sm_90a image (the only device code this file is built for).
template <int kTok>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap w_map,
                      const __grid_constant__ CUtensorMap x_map, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kStages = stages_for(kTok);
  constexpr int kStageBytes = stage_bytes(kTok);
  constexpr int kRegs = kTok / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * kStageBytes);
  uint64_t* empty = full + kStages;
  int* last_flag = reinterpret_cast<int*>(empty + kStages);
  auto weights = [&](int s) { return smem + size_t(s) * kStageBytes; };
  auto tokens = [&](int s) { return smem + size_t(s) * kStageBytes + kWeightStageBytes; };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 2);  // the weights' producer and x's, each with its bytes
      mbar_init(&empty[s], kConsumers / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  detail::launch_dependents();

  const int64_t it0 = block_start(blockIdx.x, p);
  const int64_t it1 = block_start(blockIdx.x + 1, p);

  if (threadIdx.x >= kConsumers) {
    // Producers: lane 0 of warp 0 issues every stage's weights, lane 0 of warp 1 its x, each
    // walking the stages with its own cursor (increments: a lone thread is the stream's clock,
    // and a 64-bit division a stage cost a third of its rate, dev/cuda/NOTES.md session 20).
    // The weights do not depend on the previous kernel, so only x waits for it. In cluster
    // mode every producer thread joins the reduction's two cluster barriers.
    const int warp = (threadIdx.x - kConsumers) >> 5;
    if ((threadIdx.x & 31) == 0 && it0 < it1) {
      const bool x_role = warp == 1;
      const CUtensorMap* map = x_role ? &x_map : &w_map;
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
      const uint64_t policy = x_role ? policy_evict_last() : policy_evict_first();
      const int bytes = x_role ? kStageBytes - kWeightStageBytes : kWeightStageBytes;
      if (x_role) detail::grid_dependency_wait();
      int kb = static_cast<int>(it0 % p.ksteps);
      int row0 = static_cast<int>(it0 / p.ksteps) * kTileRows;
      int s = 0;
      uint32_t pass = 0;
      for (int64_t it = it0; it < it1; ++it) {
        if (pass > 0) mbar_wait(&empty[s], (pass - 1) & 1);
        mbar_expect_tx(&full[s], bytes);
        if (x_role) {
          tma_load(tokens(s), map, &full[s], kb * kKStep, 0, policy);
        } else {
          tma_load(weights(s), map, &full[s], kb * kKStep, row0, policy);
        }
        if (++kb == p.ksteps) {
          kb = 0;
          row0 += kTileRows;
        }
        if (++s == kStages) {
          s = 0;
          ++pass;
        }
      }
    }
    if (p.cluster > 1) {
      cluster_sync();
      cluster_sync();
    }
    return;
  }

  // Consumers: warpgroup g multiplies weight rows [64g, 64g + 64) of each stage. One stage's
  // wgmmas stay in flight while the next stage's are issued; a stage is released once its
  // group has finished (wait_group 1), the last one at the segment's end.
  const int ctid = threadIdx.x;
  const int g = ctid >> 7;
  float acc[kRegs] = {};
  int s = 0;
  uint32_t phase = 0;
  bool waited = false;
  auto release = [&](int slot) {
    __syncwarp();
    if ((ctid & 31) == 0) mbar_arrive(&empty[slot]);
  };
  for (int64_t it = it0; it < it1;) {
    const int tile = static_cast<int>(it / p.ksteps);
    const int kb0 = static_cast<int>(it % p.ksteps);
    const int kb1 = static_cast<int>(kb0 + (it1 - it) < p.ksteps ? kb0 + (it1 - it) : p.ksteps);
    const bool first_segment = it == it0;
    int held = -1;  // the stage whose wgmmas may still be reading it
    for (int kb = kb0; kb < kb1; ++kb) {
      mbar_wait(&full[s], phase);
      wgmma_fence();
      const uint64_t a = smem_desc(weights(s) + g * (kWeightStageBytes / 2));
      const uint64_t b = smem_desc(tokens(s));
#pragma unroll
      for (int j = 0; j < kKStep / 16; ++j) {
        wgmma_tok<kTok>(acc, a + 2 * j, b + 2 * j, kb > kb0 || j > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();
      if (held >= 0) release(held);
      held = s;
      if (++s == kStages) {
        s = 0;
        phase ^= 1;
      }
    }
    wgmma_wait_all();
    fence_regs(acc);
    release(held);
    it += kb1 - kb0;
    if (!waited) {
      detail::grid_dependency_wait();  // y may be read or written by the previous kernel
      waited = true;
    }
    if (p.cluster > 1) {
      // The cluster's blocks hold the tile's k ranges in rank order. Every stage has been
      // consumed (no load is in flight), so the ring's first bytes take this block's sums;
      // rank 0 adds the ranks' sums in order through distributed shared memory and writes y.
      float* part = reinterpret_cast<float*>(smem);  // [kRegs][256]
#pragma unroll
      for (int r = 0; r < kRegs; ++r) part[r * kConsumers + ctid] = acc[r];
      cluster_sync();
      const int rank = static_cast<int>(blockIdx.x) % p.cluster;
      if (rank == 0) {
#pragma unroll
        for (int r = 0; r < kRegs; ++r) acc[r] = 0.0f;
        const uint32_t local = smem_addr(part + ctid);
        for (int c = 0; c < p.cluster; ++c) {
          const uint32_t remote = cluster_addr(local, c);
#pragma unroll
          for (int r = 0; r < kRegs; ++r) acc[r] += cluster_load(remote + r * kConsumers * 4);
        }
        store_tile<kTok>(acc, tile, ctid, p);
      }
      cluster_sync();  // the other ranks' shared memory stays until rank 0 has read it
      continue;
    }
    if (kb0 != 0 || kb1 != p.ksteps) {
      // A split tile: publish this block's partial sums; the last block to arrive adds
      // every segment in k order and writes y.
      const int64_t tile_first = int64_t(tile) * p.ksteps;
      const bool summed = reduce_split_tile<kRegs, kConsumers>(
          acc, p.partials, first_segment ? 0 : 1, &p.counters[tile], block_of(tile_first, p),
          block_of(tile_first + p.ksteps - 1, p), ctid, last_flag, consumer_sync,
          [&](int c) { return block_start(c, p) >= tile_first ? 0 : 1; });
      if (!summed) continue;
    }
    store_tile<kTok>(acc, tile, ctid, p);
  }
#else
  (void)w_map;
  (void)x_map;
  (void)p;
#endif
}

int tokens_for(int m) { return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128; }

template <int kTok>
cudaError_t launch(const WgmmaGemmArgs& a, const WgmmaGemmPlan& plan, cudaStream_t stream) {
  EncodeTiled fn = encoder();
  if (fn == nullptr) return cudaErrorNotSupported;
  CUtensorMap w_map{};
  CUtensorMap x_map{};
  if (!encode(fn, &w_map, a.w, a.n, a.k, a.ldw, kTileRows) ||
      !encode(fn, &x_map, a.x, a.m, a.k, a.ldx, kTok)) {
    return cudaErrorInvalidValue;
  }
  Params p;
  p.y = a.y;
  p.ldy = a.ldy;
  p.m = a.m;
  p.n = a.n;
  p.ksteps = plan.ksteps;
  p.iters = int64_t(plan.tiles) * plan.ksteps;
  p.grid = plan.grid;
  p.y_f32 = a.y_f32;
  p.accumulate = a.accumulate;
  p.partials = a.partials;
  p.counters = a.counters;
  p.cluster = plan.cluster;
  auto* kernel = &wgmma_gemm_kernel<kTok>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(plan.smem_bytes));
  if (err != cudaSuccess) return err;
  detail::LaunchConfig launch(dim3(plan.grid), dim3(kThreads), plan.smem_bytes, stream, a.pdl,
                              plan.cluster);
  if (plan.cluster > 1) {
    // Every cluster must be resident at once (one block a multiprocessor); when they are not,
    // cudaErrorNotSupported asks wgmma_gemm for the stream-K form.
    int fit = 0;
    err = cudaOccupancyMaxActiveClusters(&fit, kernel, &launch.config);
    if (err != cudaSuccess) return err;
    if (fit * plan.cluster < plan.grid) return cudaErrorNotSupported;
  }
  return cudaLaunchKernelEx(&launch.config, kernel, w_map, x_map, p);
}

}  // namespace

bool wgmma_gemm_supported(const WgmmaGemmArgs& a, int cc_major) {
  auto aligned = [](const void* ptr, uintptr_t to) {
    return reinterpret_cast<uintptr_t>(ptr) % to == 0;
  };
  return cc_major == 9 && a.m >= 1 && a.m <= kWgmmaMaxRows && a.n >= 1 && a.k >= 8 &&
         a.k % 8 == 0 && a.ldx >= a.k && a.ldx % 8 == 0 && a.ldw >= a.k && a.ldw % 8 == 0 &&
         a.ldy >= a.n && a.x != nullptr && a.w != nullptr && a.y != nullptr && aligned(a.x, 16) &&
         aligned(a.w, 16) && aligned(a.y, a.y_f32 ? 4 : 2) && a.sm_count >= 1;
}

WgmmaGemmPlan wgmma_gemm_plan(const WgmmaGemmArgs& a) {
  WgmmaGemmPlan plan;
  plan.tokens = tokens_for(a.m);
  plan.stages = stages_for(plan.tokens);
  plan.smem_bytes = smem_for(plan.tokens);
  plan.tiles = (a.n + kTileRows - 1) / kTileRows;
  plan.ksteps = (a.k + kKStep - 1) / kKStep;
  const int64_t iters = int64_t(plan.tiles) * plan.ksteps;
  int want = a.grid > 0 ? a.grid : a.sm_count;
  if (a.grid <= 0) {
    // Prefer the largest grid of at least 70 % of the multiprocessors whose blocks' ranges
    // line up with tiles (each block a whole number of tiles, or an equal share of one): the
    // H200 ran down (4096 x 14336, m = 64) at 36.2 us on 128 blocks against 40.9 us on 132
    // ragged ones, qkv at 20.9 against 22.7 (S18-W3). Otherwise one block a multiprocessor.
    for (int g = a.sm_count; g * 10 >= a.sm_count * 7 && g > 0; --g) {
      if (iters % g != 0) continue;
      const int64_t per = iters / g;
      if (per % plan.ksteps == 0 || plan.ksteps % per == 0) {
        want = g;
        break;
      }
    }
  }
  plan.grid = static_cast<int>(std::min<int64_t>(std::max(1, want), iters));
  // The stream-K form's workspace, also for the cluster form (it falls back to stream-K when
  // its clusters cannot all be resident at once).
  plan.partial_floats = size_t(plan.grid) * 2 * (plan.tokens / 2) * kConsumers;
  plan.counters = plan.tiles;
  // The cluster form: the largest cluster whose grid fills >= 70 % of the multiprocessors
  // without passing them (qkv: 48 tiles x 2 on the H200; o and down ask 32 x 4, which the
  // H200 cannot hold at once, so they run stream-K).
  int cluster = a.cluster > 1 ? a.cluster : 1;
  if (a.cluster == 0 && a.grid <= 0) {
    for (int c : {8, 4, 2}) {
      const int64_t blocks = int64_t(plan.tiles) * c;
      if (blocks <= a.sm_count && blocks * 10 >= int64_t(a.sm_count) * 7 && plan.ksteps >= c) {
        cluster = c;
        break;
      }
    }
  }
  if (cluster > 1) {
    plan.cluster = cluster;
    plan.grid = plan.tiles * cluster;
  }
  return plan;
}

namespace {

cudaError_t dispatch(const WgmmaGemmArgs& a, const WgmmaGemmPlan& plan, cudaStream_t stream) {
  if (plan.cluster == 1 && plan.grid > 1 && (a.partials == nullptr || a.counters == nullptr)) {
    return cudaErrorInvalidValue;
  }
  switch (plan.tokens) {
    case 16:
      return launch<16>(a, plan, stream);
    case 32:
      return launch<32>(a, plan, stream);
    case 64:
      return launch<64>(a, plan, stream);
    default:
      return launch<128>(a, plan, stream);
  }
}

}  // namespace

cudaError_t wgmma_gemm(const WgmmaGemmArgs& a, cudaStream_t stream) {
  if (!wgmma_gemm_supported(a, 9) || a.cluster < 0 || a.cluster > 8 ||
      (a.cluster > 1 && (a.cluster & (a.cluster - 1)) != 0)) {
    return cudaErrorInvalidValue;
  }
  const WgmmaGemmPlan plan = wgmma_gemm_plan(a);
  const cudaError_t err = dispatch(a, plan, stream);
  if (err != cudaErrorNotSupported || plan.cluster == 1 || a.cluster > 1) return err;
  // The clusters do not all fit at once: the stream-K form.
  WgmmaGemmArgs b = a;
  b.cluster = 1;
  return dispatch(b, wgmma_gemm_plan(b), stream);
}

}  // namespace hearth::cuda
