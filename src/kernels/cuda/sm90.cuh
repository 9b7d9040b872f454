// Hopper (sm_90a) building blocks shared by the wgmma GEMM and the kernel labs: mbarriers,
// 2D TMA loads with an L2 policy, wgmma shared-memory descriptors for the 128-byte swizzle,
// m64nNk16 bf16 wgmmas, and the host-side tensor-map encoder. Device code that calls these
// must be built for sm_90a alone (hearth_cuda_hopper_only, or a lab named *_sm90a).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (done == 0);
}

// 2D TMA load of box {c0 (inner), c1} into dst, completing on bar, with an L2 policy.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                         int c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

__device__ __forceinline__ uint64_t policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle TMA writes:
// rows of 128 bytes, 8-row (1024-byte) groups. k16 slice j starts 32·j bytes further.
__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
  uint64_t d = (smem_addr(tile) & 0x3FFFF) >> 4;
  d |= uint64_t(1) << 16;          // leading byte offset (unused with this swizzle)
  d |= uint64_t(1024 >> 4) << 32;  // stride byte offset: 8 rows
  d |= uint64_t(1) << 62;          // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// Waits until at most Pending of this warpgroup's committed wgmma groups are still running.
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Release/acquire at GPU scope: orders the partial sums against the arrival counter (cheaper
// than __threadfence's sequentially consistent fence).
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Stream-K's split-tile reduction, run by the Consumers threads (ctid) that hold a tile's
// Regs accumulators each: this block publishes its partial sums into its slot of partials
// ([blocks, 2, Regs, Consumers]; slot 0 for a tile's first segment, 1 otherwise) and arrives at
// the tile's counter; the last of the tile's blocks b_lo..b_hi to arrive resets the counter and
// adds every block's segment in k order into acc (slot_of(c): the slot block c used for this
// tile). Returns whether acc now holds the tile's sum. sync: the consumers' named barrier;
// last_flag: one int of shared memory.
template <int Regs, int Consumers, typename Sync, typename SlotOf>
__device__ __forceinline__ bool reduce_split_tile(float (&acc)[Regs], float* partials, int slot,
                                                  unsigned* counter, int b_lo, int b_hi, int ctid,
                                                  int* last_flag, Sync sync, SlotOf slot_of) {
  float* mine = partials + (size_t(blockIdx.x) * 2 + slot) * Regs * Consumers;
#pragma unroll
  for (int r = 0; r < Regs; ++r) __stcg(mine + r * Consumers + ctid, acc[r]);
  fence_acq_rel_gpu();
  sync();
  if (ctid == 0) {
    const unsigned arrived = atomicAdd(counter, 1u);
    const bool last = arrived == unsigned(b_hi - b_lo);
    if (last) *counter = 0;
    *last_flag = last ? 1 : 0;
  }
  sync();
  const bool last = *last_flag != 0;
  sync();  // last_flag is rewritten by the next split tile
  if (!last) return false;
  fence_acq_rel_gpu();
  // Every segment from the workspace (this block's own too: one register set), in k order.
#pragma unroll
  for (int r = 0; r < Regs; ++r) acc[r] = 0.0f;
  for (int c = b_lo; c <= b_hi; ++c) {
    const float* part = partials + (size_t(c) * 2 + slot_of(c)) * Regs * Consumers;
#pragma unroll
    for (int r = 0; r < Regs; ++r) acc[r] += __ldcg(part + r * Consumers + ctid);
  }
  return true;
}

// D[64 x 16] (+)= A[64 x 16] · B[16 x 16]; 8 accumulators a thread.
__device__ __forceinline__ void wgmma_n16(float (&d)[8], uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, "
      "%8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(a), "l"(b), "r"(scale_d));
}

// D[64 x 32] (+)= A[64 x 16] · B[16 x 32]; 16 accumulators a thread.
__device__ __forceinline__ void wgmma_n32(float (&d)[16], uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(scale_d));
}

// D[64 x 64] (+)= A[64 x 16] · B[16 x 64]; 32 accumulators a thread.
__device__ __forceinline__ void wgmma_n64(float (&d)[32], uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(scale_d));
}

// D[64 x 128] (+)= A[64 x 16] · B[16 x 128]; 64 accumulators a thread.
__device__ __forceinline__ void wgmma_n128(float (&d)[64], uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a), "l"(b), "r"(scale_d));
}

template <int kTok>
__device__ __forceinline__ void wgmma_tok(float (&d)[kTok / 2], uint64_t a, uint64_t b,
                                          int scale_d) {
  if constexpr (kTok == 16) wgmma_n16(d, a, b, scale_d);
  if constexpr (kTok == 32) wgmma_n32(d, a, b, scale_d);
  if constexpr (kTok == 64) wgmma_n64(d, a, b, scale_d);
  if constexpr (kTok == 128) wgmma_n128(d, a, b, scale_d);
}

// The f32 accumulators of an m64nNk16 wgmma: thread t of the warpgroup holds d[4j + 2h + c]
// at row 16(t / 32) + (t % 32) / 4 + 8h (the M side) and column 8j + 2(t % 4) + c (the N
// side). f(i, row, column) is called for each of its N / 2 registers.
template <int kN, typename F>
__device__ __forceinline__ void for_each_accumulator(int t, F&& f) {
  const int row0 = 16 * (t >> 5) + ((t & 31) >> 2);
  const int col0 = 2 * (t & 3);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 2; ++c) f(4 * j + 2 * h + c, row0 + 8 * h, col0 + 8 * j + c);
    }
  }
}

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// The driver's tensor-map encoder, looked up once (a pure host function of the driver).
inline EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A [rows, cols] bf16 matrix with row stride ld, read in {box_cols, box_rows} boxes with the
// 128-byte swizzle (box_cols = 64: one 128-byte row); rows and columns past the ends read as
// zero.
inline bool encode(EncodeTiled fn, CUtensorMap* map, const __nv_bfloat16* base, int64_t rows,
                   int64_t cols, int64_t ld, int box_rows, int box_cols = 64) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(base), dims,
            strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace hearth::cuda::sm90
