// Skinny bf16 GEMM (see gemm_skinny.cuh): yᵀ[n, m] = w[n, k] · xᵀ[k, m] with mma.sync
// m16n8k16 (weights are the row-major 16-row A operand, x rows are B's columns, so both load
// with non-transposed ldmatrix), a cp.async ring of 64-wide k stages, blocks looping over
// (tile, k range) units, and a deterministic split-K fix-up by the last block of a tile.
#include <algorithm>

#include "kernels/cuda/gemm_skinny.cuh"
#include "kernels/cuda/pdl.cuh"

namespace hearth::cuda {
namespace {

constexpr int kBk = 64;  // k per stage: 128 bytes of a row, eight 16-byte chunks
constexpr int kRowBytes = kBk * 2;
constexpr int kWarpRows = 32;  // weight rows per warp (two m16 A tiles)
constexpr int kMaxStages = 8;
constexpr int kMinStages = 3;
constexpr size_t kDeepBudget = size_t{200} << 10;  // one block per SM
constexpr size_t kHalfBudget = size_t{110} << 10;  // two blocks per SM

__host__ __device__ constexpr int warp_tokens(int mt) { return mt < 64 ? mt : 64; }
__host__ __device__ constexpr int block_threads(int bn, int mt) {
  return 32 * (bn / kWarpRows) * (mt / warp_tokens(mt));
}
__host__ __device__ constexpr size_t stage_bytes(int bn, int mt) {
  return static_cast<size_t>(bn + mt) * kRowBytes;
}
__host__ __device__ constexpr int ring_stages(int bn, int mt, int occupancy) {
  size_t budget = occupancy == 1 ? kDeepBudget : kHalfBudget;
  size_t s = budget / stage_bytes(bn, mt);
  return s > kMaxStages ? kMaxStages : (s < kMinStages ? kMinStages : static_cast<int>(s));
}

struct Params {
  const __nv_bfloat16* x;
  int64_t ldx;
  const __nv_bfloat16* w;
  int64_t ldw;
  void* y;
  int64_t ldy;
  int accumulate;
  int evict_first;
  int m;
  int n;
  int k;
  int tiles_n;
  int splits;
  int ksteps;
  int units;
  float* partials;
  unsigned* counters;
};

// One unit of work: a bn x mt output tile over the k stages [k_begin, k_end).
struct Unit {
  int tile;
  int split;
  int n0;
  int t0;
  int k_begin;
  int k_end;
};

template <int kBn, int kMt>
__device__ __forceinline__ Unit unit_at(const Params& p, int u) {
  Unit unit;
  unit.split = u % p.splits;
  unit.tile = u / p.splits;
  unit.n0 = (unit.tile % p.tiles_n) * kBn;
  unit.t0 = (unit.tile / p.tiles_n) * kMt;
  unit.k_begin = unit.split * p.ksteps / p.splits;
  unit.k_end = (unit.split + 1) * p.ksteps / p.splits;
  return unit;
}

// Walks a block's (unit, k stage) sequence: units blockIdx.x, + gridDim.x, ...
template <int kBn, int kMt>
struct Cursor {
  int u;
  int ks;
  Unit unit;
  __device__ __forceinline__ void start(const Params& p, int first) {
    u = first;
    if (u < p.units) {
      unit = unit_at<kBn, kMt>(p, u);
      ks = unit.k_begin;
    }
  }
  __device__ __forceinline__ bool valid(const Params& p) const { return u < p.units; }
  __device__ __forceinline__ bool last_stage() const { return ks + 1 == unit.k_end; }
  __device__ __forceinline__ void next(const Params& p) {
    if (++ks == unit.k_end) start(p, u + static_cast<int>(gridDim.x));
  }
};

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async16_hint(uint32_t dst, const void* src, bool valid,
                                                uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 16 : 0), "l"(policy));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Byte offset of 16-byte chunk c of row r in a stage: chunks are XOR-swizzled by the row so
// ldmatrix's eight rows at one chunk hit eight different bank groups.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// Copies rows [r0, r0 + kRows) x k stage ks of src (ld) into the stage at dst; rows >= limit
// and chunks past k are zero-filled.
template <int kRows, int kThreads, bool kHint>
__device__ __forceinline__ void load_tile(uint32_t dst, const __nv_bfloat16* src, int64_t ld,
                                          int r0, int limit, int ks, int k, uint64_t policy) {
  constexpr int kChunks = kRows * (kBk / 8);
  static_assert(kChunks % kThreads == 0 || kThreads % kChunks == 0, "chunks tile the block");
#pragma unroll
  for (int j = 0; j < (kChunks + kThreads - 1) / kThreads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    if (kChunks < kThreads && i >= kChunks) break;
    const int row = i >> 3;
    const int chunk = i & 7;
    const int gr = r0 + row;
    const int gk = ks * kBk + chunk * 8;
    const bool valid = gr < limit && gk < k;
    const __nv_bfloat16* from = valid ? src + static_cast<int64_t>(gr) * ld + gk : src;
    if constexpr (kHint) {
      cp_async16_hint(dst + swizzled(row, chunk), from, valid, policy);
    } else {
      cp_async16(dst + swizzled(row, chunk), from, valid);
    }
  }
}

template <typename OutT>
__device__ __forceinline__ void store_out(OutT* y, int64_t ldy, int t, int c, float v,
                                          bool accumulate) {
  OutT* dst = y + static_cast<int64_t>(t) * ldy + c;
  if constexpr (sizeof(OutT) == 4) {
    *dst = accumulate ? *dst + v : v;
  } else {
    *dst = __float2bfloat16(accumulate ? __bfloat162float(*dst) + v : v);
  }
}

template <int kBn, int kMt, int kOccupancy, typename OutT>
__global__ void __launch_bounds__(block_threads(kBn, kMt), kOccupancy)
    skinny_gemm_kernel(Params p) {
  constexpr int kThreads = block_threads(kBn, kMt);
  constexpr int kStages = ring_stages(kBn, kMt, kOccupancy);
  constexpr int kWt = warp_tokens(kMt);  // tokens per warp
  constexpr int kNt = kWt / 8;           // n8 tiles (8 tokens each) per warp
  constexpr int kWarpsN = kBn / kWarpRows;
  constexpr uint32_t kStageBytes = static_cast<uint32_t>(stage_bytes(kBn, kMt));
  constexpr uint32_t kXOffset = kBn * kRowBytes;
  constexpr int kRegs = 2 * kNt * 4;  // accumulators per thread

  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ int last_arrival;
  const uint32_t ring_base = shared_address(ring);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int wn = warp % kWarpsN;
  const int wt = warp / kWarpsN;
  const uint64_t policy = p.evict_first ? evict_first_policy() : 0;

  auto load_w = [&](int stage, const Cursor<kBn, kMt>& c) {
    const uint32_t dst = ring_base + static_cast<uint32_t>(stage) * kStageBytes;
    if (p.evict_first) {
      load_tile<kBn, kThreads, true>(dst, p.w, p.ldw, c.unit.n0, p.n, c.ks, p.k, policy);
    } else {
      load_tile<kBn, kThreads, false>(dst, p.w, p.ldw, c.unit.n0, p.n, c.ks, p.k, policy);
    }
  };
  auto load_x = [&](int stage, const Cursor<kBn, kMt>& c) {
    const uint32_t dst = ring_base + static_cast<uint32_t>(stage) * kStageBytes + kXOffset;
    load_tile<kMt, kThreads, false>(dst, p.x, p.ldx, c.unit.t0, p.m, c.ks, p.k, 0);
  };

  // Prologue: the weights of the first kStages - 1 stages go out before waiting on the
  // previous kernel (they never depend on it), x after. Group 0 holds all those weights.
  Cursor<kBn, kMt> load;
  load.start(p, static_cast<int>(blockIdx.x));
  {
    Cursor<kBn, kMt> ahead = load;
    for (int s = 0; s < kStages - 1; ++s) {
      if (ahead.valid(p)) {
        load_w(s, ahead);
        ahead.next(p);
      }
    }
  }
  // The next kernel (when launched with PDL) may start now: its blocks take the SMs this
  // grid's blocks leave and stream their own weights during this grid's tail; it waits
  // (griddepcontrol.wait) for this grid's completion before reading y.
  detail::launch_dependents();
  detail::grid_dependency_wait();
  for (int s = 0; s < kStages - 1; ++s) {
    if (load.valid(p)) {
      load_x(s, load);
      load.next(p);
    }
    cp_async_commit();
  }

  float acc[2][kNt][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }

  Cursor<kBn, kMt> cur;
  cur.start(p, static_cast<int>(blockIdx.x));
  int stage = 0;
  int load_stage = kStages - 1;
  while (cur.valid(p)) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `stage` landed for all threads; load_stage is free
    if (load.valid(p)) {
      load_w(load_stage, load);
      load_x(load_stage, load);
      load.next(p);
    }
    cp_async_commit();
    load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;

    const uint32_t w_base = ring_base + static_cast<uint32_t>(stage) * kStageBytes;
    const uint32_t x_base = w_base + kXOffset;
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      uint32_t a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = wn * kWarpRows + i * 16 + (lane & 15);
        ldmatrix_x4(a[i], w_base + swizzled(row, kk * 2 + (lane >> 4)));
      }
      uint32_t b[kNt][2];
#pragma unroll
      for (int j = 0; j < kNt / 2; ++j) {
        const int tok = wt * kWt + j * 16 + (lane & 7) + ((lane >> 4) << 3);
        uint32_t r[4];
        ldmatrix_x4(r, x_base + swizzled(tok, kk * 2 + ((lane >> 3) & 1)));
        b[2 * j][0] = r[0];
        b[2 * j][1] = r[1];
        b[2 * j + 1][0] = r[2];
        b[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < kNt; ++j) mma_bf16(acc[i][j], a[i], b[j]);
      }
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;

    if (cur.last_stage()) {
      const Unit& unit = cur.unit;
      bool write = true;
      if (p.splits > 1) {
        // Partials in thread order (coalesced); the tile's last block to arrive sums all
        // splits in split order, so the result does not depend on the arrival order.
        const size_t tile_floats = static_cast<size_t>(kBn) * kMt;
        float* mine =
            p.partials + (static_cast<size_t>(unit.tile) * p.splits + unit.split) * tile_floats;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int j = 0; j < kNt; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = (i * kNt + j) * 4 + e;
              __stcg(mine + r * kThreads + threadIdx.x, acc[i][j][e]);
            }
          }
        }
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
          const unsigned prev = atomicAdd(p.counters + unit.tile, 1u);
          last_arrival = prev + 1 == static_cast<unsigned>(p.splits);
        }
        __syncthreads();
        write = last_arrival != 0;
        if (write) {
          __threadfence();
          const float* tile_base =
              p.partials + static_cast<size_t>(unit.tile) * p.splits * tile_floats;
#pragma unroll
          for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int j = 0; j < kNt; ++j) {
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int r = (i * kNt + j) * 4 + e;
                float sum = 0.0f;
                for (int s = 0; s < p.splits; ++s) {
                  sum += s == unit.split
                             ? acc[i][j][e]
                             : __ldcg(tile_base + s * tile_floats + r * kThreads + threadIdx.x);
                }
                acc[i][j][e] = sum;
              }
            }
          }
          if (threadIdx.x == 0) p.counters[unit.tile] = 0;
        }
        static_assert(kRegs * kThreads == kBn * kMt, "partials cover the tile");
      }
      if (write) {
        const int g = lane >> 2;
        const int tig = lane & 3;
        OutT* y = static_cast<OutT*>(p.y);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int j = 0; j < kNt; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = unit.n0 + wn * kWarpRows + i * 16 + g + (e >> 1) * 8;
              const int t = unit.t0 + wt * kWt + j * 8 + tig * 2 + (e & 1);
              if (col < p.n && t < p.m) store_out(y, p.ldy, t, col, acc[i][j][e], p.accumulate);
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < kNt; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
        }
      }
    }
    cur.next(p);
  }
  cp_async_wait<0>();
}

int pick_tile_rows(int m) {
  if (m <= 16) return 16;
  if (m <= 32) return 32;
  if (m <= 64) return 64;
  return kSkinnyMaxTileRows;
}

int plan_stages(int bn, int mt, int occupancy) { return ring_stages(bn, mt, occupancy); }

template <int kBn, int kMt, int kOccupancy, typename OutT>
cudaError_t launch(const Params& params, const SkinnyGemmPlan& plan, bool pdl,
                   cudaStream_t stream) {
  auto kernel = skinny_gemm_kernel<kBn, kMt, kOccupancy, OutT>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(plan.smem_bytes));
  if (err != cudaSuccess) return err;
  return detail::launch_kernel(kernel, dim3(plan.grid), dim3(plan.threads), plan.smem_bytes, stream,
                               pdl, params);
}

template <int kBn, int kMt, typename OutT>
cudaError_t launch_occupancy(const Params& params, const SkinnyGemmPlan& plan, int occupancy,
                             bool pdl, cudaStream_t stream) {
  if constexpr (kBn > 128) {
    return launch<kBn, kMt, 1, OutT>(params, plan, pdl, stream);  // one block per SM only
  } else {
    return occupancy == 1 ? launch<kBn, kMt, 1, OutT>(params, plan, pdl, stream)
                          : launch<kBn, kMt, 2, OutT>(params, plan, pdl, stream);
  }
}

template <int kBn, typename OutT>
cudaError_t launch_tile(const Params& params, const SkinnyGemmPlan& plan, int occupancy, bool pdl,
                        cudaStream_t stream) {
  switch (plan.mt) {
    case 16:
      return launch_occupancy<kBn, 16, OutT>(params, plan, occupancy, pdl, stream);
    case 32:
      return launch_occupancy<kBn, 32, OutT>(params, plan, occupancy, pdl, stream);
    case 64:
      return launch_occupancy<kBn, 64, OutT>(params, plan, occupancy, pdl, stream);
    default:
      return launch_occupancy<kBn, kSkinnyMaxTileRows, OutT>(params, plan, occupancy, pdl, stream);
  }
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

bool skinny_gemm_supported(const SkinnyGemmArgs& a) {
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.x == nullptr || a.w == nullptr || a.y == nullptr) {
    return false;
  }
  if (a.k % 8 != 0 || a.ldx % 8 != 0 || a.ldw % 8 != 0 || a.ldx < a.k || a.ldw < a.k ||
      a.ldy < a.n) {
    return false;
  }
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0 || reinterpret_cast<uintptr_t>(a.w) % 16 != 0) {
    return false;
  }
  if (a.bn != 0 && a.bn != 64 && a.bn != 128 && a.bn != 256) return false;
  if (a.occupancy != 0 && a.occupancy != 1 && a.occupancy != 2) return false;
  return a.sm_count > 0;
}

SkinnyGemmPlan skinny_gemm_plan(const SkinnyGemmArgs& a) {
  SkinnyGemmPlan plan;
  plan.mt = pick_tile_rows(a.m);
  plan.bn = a.bn != 0 ? a.bn : 128;
  const int occupancy = plan.bn > 128 ? 1 : (a.occupancy != 0 ? a.occupancy : 1);
  plan.stages = plan_stages(plan.bn, plan.mt, occupancy);
  plan.threads = block_threads(plan.bn, plan.mt);
  plan.smem_bytes = stage_bytes(plan.bn, plan.mt) * static_cast<size_t>(plan.stages);
  const int tiles = ceil_div(a.n, plan.bn) * ceil_div(a.m, plan.mt);
  const int ksteps = ceil_div(a.k, kBk);
  const int slots = a.sm_count * occupancy;
  int splits = a.splits;
  if (splits <= 0) {
    // Split k only while the tiles leave SMs idle, and keep >= 8 stages a split.
    splits = tiles >= slots ? 1 : slots / tiles;
    splits = std::min(splits, std::max(1, ksteps / 8));
  }
  plan.splits = std::max(1, std::min(splits, ksteps));
  plan.units = tiles * plan.splits;
  plan.grid = a.grid > 0 ? std::min(a.grid, plan.units) : std::min(plan.units, slots);
  if (plan.splits > 1) {
    plan.partial_floats = static_cast<size_t>(plan.units) * plan.bn * plan.mt;
    plan.counters = tiles;
  }
  return plan;
}

cudaError_t skinny_gemm(const SkinnyGemmArgs& a, cudaStream_t stream) {
  if (!skinny_gemm_supported(a)) return cudaErrorInvalidValue;
  const SkinnyGemmPlan plan = skinny_gemm_plan(a);
  if (plan.splits > 1 && (a.partials == nullptr || a.counters == nullptr)) {
    return cudaErrorInvalidValue;
  }
  Params params{};
  params.x = a.x;
  params.ldx = a.ldx;
  params.w = a.w;
  params.ldw = a.ldw;
  params.y = a.y;
  params.ldy = a.ldy;
  params.accumulate = a.accumulate ? 1 : 0;
  params.evict_first = a.evict_first ? 1 : 0;
  params.m = a.m;
  params.n = a.n;
  params.k = a.k;
  params.tiles_n = ceil_div(a.n, plan.bn);
  params.splits = plan.splits;
  params.ksteps = ceil_div(a.k, kBk);
  params.units = plan.units;
  params.partials = a.partials;
  params.counters = a.counters;
  const int occupancy = a.occupancy != 0 ? a.occupancy : 1;
  if (plan.bn == 256) {
    return a.y_f32 ? launch_tile<256, float>(params, plan, occupancy, a.pdl, stream)
                   : launch_tile<256, __nv_bfloat16>(params, plan, occupancy, a.pdl, stream);
  }
  if (plan.bn == 64) {
    return a.y_f32 ? launch_tile<64, float>(params, plan, occupancy, a.pdl, stream)
                   : launch_tile<64, __nv_bfloat16>(params, plan, occupancy, a.pdl, stream);
  }
  return a.y_f32 ? launch_tile<128, float>(params, plan, occupancy, a.pdl, stream)
                 : launch_tile<128, __nv_bfloat16>(params, plan, occupancy, a.pdl, stream);
}

}  // namespace hearth::cuda
