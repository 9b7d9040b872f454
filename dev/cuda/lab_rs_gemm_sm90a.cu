// Lab (issue 6): does a GEMM whose weights never touch shared memory stream the 64-row decode
// step closer to the memory rate than cuBLASLt? Session 20's persistent chain streamed its
// TMA loads alone at 95 % of the read-only rate, but loads + wgmmas together ran ~20 % slower
// (shared-memory writes of every weight byte, then the wgmmas' reads of them, are one
// candidate for that interference). Here the weights are wgmma's A operand from registers:
//
//   yᵀ[64 weight rows, 64 tokens] = w[64 rows, k] · xᵀ[k, 64 tokens]   (m64n64k16, A = w)
//
// - Each thread loads its own A fragments straight from the row-major weights with 16-byte
//   ld.global.nc, kDepth 64-wide k steps ahead in registers (4 loads a step). The four lanes
//   of a row read its 128 bytes of the step as two 64-byte runs, so every sector fetched is
//   used whole; the fragment's k order is a permutation of the step's 64 columns, and x is
//   written into shared memory in the same permutation (so the sum is over the same pairs).
// - x (the 64 tokens) goes through a ring of kAhead + 3 shared-memory stages in the 128-byte
//   swizzle, written by the group's own threads (16-byte loads from L2, four 4-byte stores);
//   one named barrier a step. Only x, 8 KB a step, is shared.
// - A block is kRowWgs warpgroups side by side (64 weight rows each, one x ring) times kSplit
//   groups along k (each its own ring); the groups' sums are added in group order through
//   shared memory at the end (deterministic). One 64 x kRowWgs row tile a block.
//
// Timed as a decode step runs GEMMs: weights from DRAM (rotating over > 256 MB of copies),
// calls replayed from one CUDA graph, with and without PDL (weight prologue before the wait).
// Every variant is checked against cuBLASLt (bf16 within one rounding) before it is timed.
// Then an 8-layer chain of the four layer GEMMs, cuBLASLt against the per-shape fastest.
// Ceilings in the same process: the copy and a read-only stream.
// Environment: LAB_ONLY=<shape>; LAB_M=<m> (default 64); LAB_CHAIN=0 to skip the chain.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/sm90.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;
using namespace hearth::cuda::sm90;

constexpr int kStageBytes = 64 * 128;  // 64 tokens x 64 k of x, bf16

struct RsArgs {
  const Bf16* x = nullptr;  // [m, ldx]
  const Bf16* w = nullptr;  // [n, ldw]
  Bf16* y = nullptr;        // [m, ldy]
  int m = 0;
  int n = 0;
  int k = 0;
  int ldx = 0;
  int ldw = 0;
  int ldy = 0;
  int pdl = 0;
};

// D[64 x 64] += A[64 x 16] (registers) · B[16 x 64] (shared memory descriptor).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}

// A 16-byte weight load. kLoad 0: ld.global.nc; 1: + L1::no_allocate; 2: + L2::256B prefetch.
template <int kLoad>
__device__ __forceinline__ uint4 load_weights(const Bf16* p) {
  uint4 v;
  if constexpr (kLoad == 0) {
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else if constexpr (kLoad == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  }
  return v;
}

__device__ __forceinline__ void store_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// One 64-wide k step of a thread's weights: rows r and r + 8, each as two 16-byte pieces
// (columns 8q..8q+7 and 32+8q..32+8q+7 of the step). Fragment of k16 slice s (0..3):
// {row r piece s/2 word 2(s%2), row r+8 same, row r word 2(s%2)+1, row r+8 same} — so slice s,
// lane q holds columns 32(s/2) + 8q + 4(s%2) + {0,1} at fragment k 2q, 2q+1 and + {2,3} at
// 2q+8, 2q+9. x is stored in that order.
struct StepRegs {
  uint4 r0lo, r0hi, r1lo, r1hi;
};

template <int kLoad>
__device__ __forceinline__ void load_step(StepRegs& s, const Bf16* w0, const Bf16* w1, int step) {
  const int off = step * 64;
  s.r0lo = load_weights<kLoad>(w0 + off);
  s.r0hi = load_weights<kLoad>(w0 + off + 32);
  s.r1lo = load_weights<kLoad>(w1 + off);
  s.r1hi = load_weights<kLoad>(w1 + off + 32);
}

// x[token, 8c..8c+7] of a step (c = 0..7) into the stage's swizzled, permuted row.
__device__ __forceinline__ void store_x(uint32_t stage, int token, int c, uint4 v) {
  const int h = c >> 2;
  const int q = c & 3;
  const uint32_t row = stage + uint32_t(token) * 128 + uint32_t(4 * q);
  const int sw = token & 7;
  store_shared_u32(row + uint32_t(((4 * h + 0) ^ sw) << 4), v.x);
  store_shared_u32(row + uint32_t(((4 * h + 1) ^ sw) << 4), v.y);
  store_shared_u32(row + uint32_t(((4 * h + 2) ^ sw) << 4), v.z);
  store_shared_u32(row + uint32_t(((4 * h + 3) ^ sw) << 4), v.w);
}

template <int kRowWgs, int kSplit, int kDepth, int kAhead, int kLoad, bool kMath>
__global__ void __launch_bounds__(128 * kRowWgs * kSplit, 1) rs_gemm_kernel(RsArgs a) {
  constexpr int kGroupThreads = 128 * kRowWgs;
  constexpr int kSlots = kAhead + 3;
  constexpr int kXLoads = 512 / kGroupThreads;  // 16-byte pieces of a stage a thread
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  unsigned char* base_ptr = smem_raw + (base - smem_addr(smem_raw));

  detail::launch_dependents();
  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const int group = wg / kRowWgs;
  const int rwg = wg % kRowWgs;
  const int gtid = tid - group * kGroupThreads;
  const int t = tid & 127;
  const int lane = t & 31;
  const int steps = a.k / 64 / kSplit;
  const int k0 = group * steps * 64;
  const int tile_row = blockIdx.x * 64 * kRowWgs + rwg * 64;
  const int row = tile_row + (t >> 5) * 16 + (lane >> 2);
  const Bf16* w0 = a.w + size_t(row) * a.ldw + k0 + (lane & 3) * 8;
  const Bf16* w1 = w0 + size_t(8) * a.ldw;
  const uint32_t ring = base + uint32_t(group * kSlots * kStageBytes);

  StepRegs buf[kDepth];
#pragma unroll
  for (int j = 0; j < kDepth; ++j) {
    if (j < steps) load_step<kLoad>(buf[j], w0, w1, j);
  }
  if (a.pdl) detail::grid_dependency_wait();

  // x pieces of a stage this thread writes: piece e = gtid + j * kGroupThreads.
  const Bf16* xg = a.x + k0;
  auto load_x = [&](uint4(&v)[kXLoads], int step) {
#pragma unroll
    for (int j = 0; j < kXLoads; ++j) {
      const int e = gtid + j * kGroupThreads;
      const int token = e >> 3;
      v[j] = token < a.m ? __ldcg(reinterpret_cast<const uint4*>(xg + size_t(token) * a.ldx +
                                                                 step * 64 + (e & 7) * 8))
                         : make_uint4(0, 0, 0, 0);
    }
  };
  auto write_x = [&](const uint4(&v)[kXLoads], int step) {
    const uint32_t stage = ring + uint32_t((step % kSlots) * kStageBytes);
#pragma unroll
    for (int j = 0; j < kXLoads; ++j) {
      const int e = gtid + j * kGroupThreads;
      store_x(stage, e >> 3, e & 7, v[j]);
    }
  };
  uint4 xr[kXLoads];
  for (int s = 0; s < kAhead && s < steps; ++s) {
    load_x(xr, s);
    write_x(xr, s);
  }
  if (kAhead < steps) load_x(xr, kAhead);
  fence_proxy_async_shared();

  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  uint32_t sink = 0;

  for (int i0 = 0; i0 < steps; i0 += kDepth) {
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
      const int i = i0 + j;
      if (i < steps) {
        if (i + kAhead < steps) {
          write_x(xr, i + kAhead);
          fence_proxy_async_shared();
          if (i + kAhead + 1 < steps) load_x(xr, i + kAhead + 1);
        }
        named_sync(1 + group, kGroupThreads);
        const StepRegs& r = buf[j];
        if constexpr (kMath) {
          const uint64_t desc = smem_desc(base_ptr + (ring - base) + (i % kSlots) * kStageBytes);
          wgmma_fence();
          wgmma_rs_n64(acc, r.r0lo.x, r.r1lo.x, r.r0lo.y, r.r1lo.y, desc);
          wgmma_rs_n64(acc, r.r0lo.z, r.r1lo.z, r.r0lo.w, r.r1lo.w, desc + 2);
          wgmma_rs_n64(acc, r.r0hi.x, r.r1hi.x, r.r0hi.y, r.r1hi.y, desc + 4);
          wgmma_rs_n64(acc, r.r0hi.z, r.r1hi.z, r.r0hi.w, r.r1hi.w, desc + 6);
          wgmma_commit();
          wgmma_wait<1>();
        } else {
          sink ^= r.r0lo.x ^ r.r0lo.y ^ r.r0lo.z ^ r.r0lo.w ^ r.r0hi.x ^ r.r0hi.y ^ r.r0hi.z ^
                  r.r0hi.w ^ r.r1lo.x ^ r.r1lo.y ^ r.r1lo.z ^ r.r1lo.w ^ r.r1hi.x ^ r.r1hi.y ^
                  r.r1hi.z ^ r.r1hi.w;
        }
        // The group of step i - 1 is done: its registers take step i - 1 + kDepth.
        const int prev = (j + kDepth - 1) % kDepth;  // a constant once unrolled
        if constexpr (kMath) {
          if (i >= 1 && i - 1 + kDepth < steps) load_step<kLoad>(buf[prev], w0, w1, i - 1 + kDepth);
        } else {
          if (i + kDepth < steps) load_step<kLoad>(buf[j], w0, w1, i + kDepth);
        }
      }
    }
  }
  if constexpr (kMath) {
    wgmma_wait<0>();
  } else {
    acc[0] = __uint_as_float(sink & 0x3f000000u);
  }

  if constexpr (kSplit > 1) {
    __syncthreads();  // every group is past its ring
    float* red = reinterpret_cast<float*>(base_ptr);
    if (group > 0) {
      float* mine = red + size_t((group - 1) * kRowWgs + rwg) * 32 * 128;
#pragma unroll
      for (int r = 0; r < 32; ++r) mine[r * 128 + t] = acc[r];
    }
    __syncthreads();
    if (group == 0) {
      for (int gi = 1; gi < kSplit; ++gi) {
        const float* theirs = red + size_t((gi - 1) * kRowWgs + rwg) * 32 * 128;
#pragma unroll
        for (int r = 0; r < 32; ++r) acc[r] += theirs[r * 128 + t];
      }
    }
  }
  if (group == 0) {
    for_each_accumulator<64>(t, [&](int reg, int r, int token) {
      if (token < a.m) a.y[size_t(token) * a.ldy + tile_row + r] = __float2bfloat16(acc[reg]);
    });
  }
}

struct Variant {
  std::string name;
  int row_wgs;
  int split;
  std::function<cudaError_t(const RsArgs&, cudaStream_t)> run;
};

template <int kRowWgs, int kSplit, int kDepth, int kAhead, int kLoad, bool kMath>
Variant make_variant(const char* name) {
  auto run = [](const RsArgs& a, cudaStream_t st) -> cudaError_t {
    auto kernel = rs_gemm_kernel<kRowWgs, kSplit, kDepth, kAhead, kLoad, kMath>;
    const size_t smem = size_t(kSplit) * (kAhead + 3) * kStageBytes + 1024;
    static bool configured = false;
    if (!configured) {
      const cudaError_t err = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (err != cudaSuccess) return err;
      configured = true;
    }
    const int grid = a.n / (64 * kRowWgs);
    detail::LaunchConfig launch(dim3(grid), dim3(128 * kRowWgs * kSplit), smem, st, a.pdl != 0, 1);
    return cudaLaunchKernelEx(&launch.config, kernel, a);
  };
  return Variant{name, kRowWgs, kSplit, run};
}

std::vector<Variant> variants() {
  return {
      make_variant<1, 1, 4, 2, 1, true>("r1s1d4"),
      make_variant<1, 2, 4, 2, 1, true>("r1s2d4"),
      make_variant<1, 4, 3, 2, 1, true>("r1s4d3"),
      make_variant<1, 4, 4, 2, 1, true>("r1s4d4"),
      make_variant<1, 4, 4, 2, 0, true>("r1s4d4-l0"),
      make_variant<1, 4, 4, 2, 2, true>("r1s4d4-l2"),
      make_variant<2, 1, 4, 2, 1, true>("r2s1d4"),
      make_variant<2, 2, 4, 2, 1, true>("r2s2d4"),
      make_variant<4, 1, 3, 2, 1, true>("r4s1d3"),
      make_variant<4, 1, 4, 2, 1, true>("r4s1d4"),
      make_variant<1, 4, 4, 2, 1, false>("r1s4d4-loads"),
      make_variant<4, 1, 4, 2, 1, false>("r4s1d4-loads"),
      make_variant<2, 2, 4, 2, 1, false>("r2s2d4-loads"),
  };
}

bool fits(const Variant& v, int n, int k) {
  return n % (64 * v.row_wgs) == 0 && (k / 64) % v.split == 0;
}

struct ShapeBuffers {
  Bf16* w = nullptr;  // copies x [n, k]
  Bf16* x = nullptr;  // [64, k]
  Bf16* y_ref = nullptr;
  Bf16* y = nullptr;
  int copies = 0;
};

ShapeBuffers make_buffers(const WeightShape& s, int copies, cudaStream_t st) {
  ShapeBuffers b;
  b.copies = copies;
  const size_t wcount = size_t(s.n) * s.k;
  CK(cudaMalloc(&b.w, wcount * 2 * copies));
  CK(cudaMalloc(&b.x, size_t(64) * s.k * 2));
  CK(cudaMalloc(&b.y_ref, size_t(64) * s.n * 2));
  CK(cudaMalloc(&b.y, size_t(64) * s.n * 2));
  CK(fill_random_bf16(b.w, wcount * copies, 100 + s.n, 0.05f, st));
  CK(fill_random_bf16(b.x, size_t(64) * s.k, 7 + s.k, 1.0f, st));
  return b;
}

void free_buffers(ShapeBuffers& b) {
  cudaFree(b.w);
  cudaFree(b.x);
  cudaFree(b.y_ref);
  cudaFree(b.y);
}

RsArgs args_for(const WeightShape& s, const Bf16* x, const Bf16* w, Bf16* y, int m, int pdl) {
  RsArgs a;
  a.x = x;
  a.w = w;
  a.y = y;
  a.m = m;
  a.n = s.n;
  a.k = s.k;
  a.ldx = s.k;
  a.ldw = s.k;
  a.ldy = s.n;
  a.pdl = pdl;
  return a;
}

using Best = std::map<std::string, const Variant*>;

void shape_sweep(DeviceContext& ctx, const WeightShape& s, int m, double copy_bw, double read_bw,
                 const std::vector<Variant>& vs, Best& best) {
  cudaStream_t st = ctx.stream();
  const size_t wbytes = size_t(s.n) * s.k * 2;
  const int copies = static_cast<int>(std::max<size_t>(2, (size_t{512} << 20) / wbytes + 1));
  const int calls = std::max(8, 2 * copies);
  ShapeBuffers b = make_buffers(s, copies, st);
  auto wcopy = [&](int i) { return b.w + size_t(i % copies) * s.n * s.k; };
  GemmBf16Options cublas_only;
  cublas_only.wgmma = false;
  GemmBf16 gemm(ctx, cublas_only);
  const GemmShape g{m, s.n, s.k, s.k, s.k, s.n, GemmOut::kBf16, false};
  std::printf("\n== %s %dx%d m=%d (%.1f MB, %d copies, %d calls a graph)\n", s.name, s.n, s.k, m,
              wbytes / 1e6, copies, calls);
  CK(gemm.run(g, b.x, b.w, b.y_ref));
  CK(cudaStreamSynchronize(st));
  const std::vector<float> ref = to_host_bf16(b.y_ref, size_t(m) * s.n);
  const double floor_us = wbytes / copy_bw * 1e6;
  const double read_us = wbytes / read_bw * 1e6;
  const double base = graph_us(st, calls, [&](int i) { CK(gemm.run(g, b.x, wcopy(i), b.y)); });
  std::printf("  %-14s %8.2f us  %5.1f %% copy  %5.1f %% read-only\n", "cuBLASLt", base,
              100 * floor_us / base, 100 * read_us / base);
  double best_us = 1e30;
  for (const Variant& v : vs) {
    if (!fits(v, s.n, s.k)) continue;
    const bool loads_only = v.name.find("-loads") != std::string::npos;
    CK(cudaMemsetAsync(b.y, 0, size_t(m) * s.n * 2, st));
    CK(v.run(args_for(s, b.x, b.w, b.y, m, 0), st));
    CK(cudaStreamSynchronize(st));
    double ratio = 0;
    if (!loads_only) ratio = check_ratio(to_host_bf16(b.y, size_t(m) * s.n), ref, false);
    for (int pdl = 0; pdl < 2; ++pdl) {
      const double us = graph_us(
          st, calls, [&](int i) { CK(v.run(args_for(s, b.x, wcopy(i), b.y, m, pdl), st)); });
      std::printf("  %-14s %s %8.2f us  %5.1f %% copy  %5.1f %% read-only  %.2fx cuBLASLt  %s\n",
                  v.name.c_str(), pdl ? "pdl" : "   ", us, 100 * floor_us / us, 100 * read_us / us,
                  base / us, loads_only ? "(loads alone)" : (ratio <= 1 ? "ok" : "FAIL"));
      if (!loads_only && ratio > 1 && pdl == 0) {
        std::printf("    check ratio %.3g\n", ratio);
        break;
      }
      if (!loads_only && ratio <= 1 && pdl == 1 && us < best_us) {
        best_us = us;
        best[s.name] = &v;
      }
    }
  }
  free_buffers(b);
}

// 8 layers x (qkv, o, gate_up, down), distinct weights, one graph: cuBLASLt against the
// per-shape fastest variant (PDL on).
void chain(DeviceContext& ctx, int m, double copy_bw, const Best& best) {
  cudaStream_t st = ctx.stream();
  constexpr int kLayers = 8;
  const WeightShape shapes[4] = {kLlama8bShapes[0], kLlama8bShapes[1], kLlama8bShapes[2],
                                 kLlama8bShapes[3]};
  for (const WeightShape& s : shapes) {
    if (best.find(s.name) == best.end()) {
      std::printf("chain: no passing variant for %s\n", s.name);
      return;
    }
  }
  std::vector<ShapeBuffers> bufs;
  size_t layer_bytes = 0;
  for (const WeightShape& s : shapes) {
    bufs.push_back(make_buffers(s, kLayers, st));
    layer_bytes += size_t(s.n) * s.k * 2;
  }
  GemmBf16Options cublas_only;
  cublas_only.wgmma = false;
  GemmBf16 gemm(ctx, cublas_only);
  auto wl = [&](int si, int layer) {
    return bufs[si].w + size_t(layer) * shapes[si].n * shapes[si].k;
  };
  const double floor_us = layer_bytes / copy_bw * 1e6;
  const double cublas = graph_us(st, kLayers, [&](int layer) {
    for (int si = 0; si < 4; ++si) {
      const WeightShape& s = shapes[si];
      const GemmShape g{m, s.n, s.k, s.k, s.k, s.n, GemmOut::kBf16, false};
      CK(gemm.run(g, bufs[si].x, wl(si, layer), bufs[si].y));
    }
  });
  std::printf("\n== chain, %d layers, m=%d (%.0f MB a layer)\n", kLayers, m, layer_bytes / 1e6);
  std::printf("  cuBLASLt        %8.2f us a layer  %5.1f %% copy\n", cublas,
              100 * floor_us / cublas);
  for (int pdl = 0; pdl < 2; ++pdl) {
    const double us = graph_us(st, kLayers, [&](int layer) {
      for (int si = 0; si < 4; ++si) {
        const WeightShape& s = shapes[si];
        const Variant& v = *best.at(s.name);
        CK(v.run(args_for(s, bufs[si].x, wl(si, layer), bufs[si].y, m, pdl), st));
      }
    });
    std::printf("  register-A %s   %8.2f us a layer  %5.1f %% copy  %.3fx cuBLASLt  (",
                pdl ? "pdl" : "   ", us, 100 * floor_us / us, cublas / us);
    for (const WeightShape& s : shapes)
      std::printf(" %s=%s", s.name, best.at(s.name)->name.c_str());
    std::printf(" )\n");
  }
  for (ShapeBuffers& b : bufs) free_buffers(b);
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  using namespace hearth::cuda;
  using namespace hearth::cuda::dev;
  return run_reported("lab_rs_gemm", [](DeviceContext& ctx) {
    const int sms = ctx.properties().multiProcessorCount;
    const double copy_bw = measure_copy_bandwidth(ctx.stream());
    const double read_bw = measure_read_bandwidth(ctx.stream(), sms);
    const char* m_env = std::getenv("LAB_M");
    const int m = m_env != nullptr ? std::atoi(m_env) : 64;
    const std::vector<Variant> vs = variants();
    Best best;
    for (int i = 0; i < 4; ++i) {
      const WeightShape& s = kLlama8bShapes[i];
      const char* only = std::getenv("LAB_ONLY");
      if (only != nullptr && std::strcmp(only, s.name) != 0) continue;
      try {
        shape_sweep(ctx, s, m, copy_bw, read_bw, vs, best);
      } catch (const std::exception& e) {
        std::printf("%s: ERROR %s\n", s.name, e.what());
      }
    }
    const char* chain_env = std::getenv("LAB_CHAIN");
    if (chain_env == nullptr || std::strcmp(chain_env, "0") != 0) chain(ctx, m, copy_bw, best);
  });
}
