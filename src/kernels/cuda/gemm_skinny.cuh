// Skinny bf16 GEMM for batched decode (a few to ~128 rows): y[m, n] = x[m, k] · w[n, k]^T
// (+ y), f32 accumulation, in GemmBf16's layout. Status: an experiment, not routed by
// default — on the H200 (W1, dev/cuda/NOTES.md gpu-gemm) it ran at 0.26-0.99x cuBLASLt: close
// only on gate_up/lm_head at m <= 64, far behind at m >= 32 on the smaller shapes (one 4-warp
// block per SM leaves mma/ldmatrix latencies exposed). This kernel computes yᵀ = w · xᵀ on the
// tensor cores (mma.sync m16n8k16, weights as the 16-row operand so m only sets the 8-wide side):
// each block owns bn weight rows x mt tokens, streams its weight tile once through a deep
// cp.async ring (16-byte loads, swizzled shared memory, ldmatrix), with the matching x tile
// beside it (x is re-read from L2 by every block column). Blocks loop over their units (a
// tile and a k range), so the ring keeps streaming across tiles; split-K (when the tiles
// cannot fill the SMs) writes f32 partials that the last block of a tile sums in split order,
// so results are deterministic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hearth::cuda {

struct SkinnyGemmArgs {
  const __nv_bfloat16* x = nullptr;  // [m, k] (ldx)
  int64_t ldx = 0;
  const __nv_bfloat16* w = nullptr;  // [n, k] (ldw)
  int64_t ldw = 0;
  void* y = nullptr;  // [m, n] (ldy), bf16 or f32
  int64_t ldy = 0;
  bool y_f32 = false;
  bool accumulate = false;  // y += x·wᵀ (one rounding) instead of y = x·wᵀ
  int m = 0;
  int n = 0;
  int k = 0;
  int sm_count = 0;
  // Tuning (0 = pick): weight rows per block (64, 128 or 256), shared-memory budget per
  // block (1: deep ring, one block per SM; 2: half, two blocks per SM; 256 rows: always 1),
  // k splits, grid blocks.
  int bn = 0;
  int occupancy = 0;
  int splits = 0;
  int grid = 0;
  bool pdl = false;          // programmatic dependent launch (sm_90+): weight loads start
                             // before the previous kernel finishes
  bool evict_first = false;  // weights loaded with an L2 evict-first policy
  // Split-K workspace (needed when the chosen splits > 1; see skinny_gemm_workspace):
  // f32 partials and per-tile arrival counters (zero before the first call; every call
  // leaves them zero).
  float* partials = nullptr;
  unsigned* counters = nullptr;
};

// Tokens per block tile the kernel instantiates at most.
constexpr int kSkinnyMaxTileRows = 128;
// The rows GemmBf16 routes here (see skinny_gemm_routed in gemm_bf16.h).
constexpr int kSkinnyMinRoutedRows = 3;
constexpr int kSkinnyMaxRoutedRows = 128;

// The resolved launch of a call: what skinny_gemm will run for these args.
struct SkinnyGemmPlan {
  int bn = 0;
  int mt = 0;
  int stages = 0;
  int threads = 0;
  int splits = 1;
  int units = 0;
  int grid = 0;
  size_t smem_bytes = 0;
  size_t partial_floats = 0;  // workspace the plan needs (0 without split-K)
  int counters = 0;
};

// True when the kernel takes the shape: k, ldx, ldw multiples of 8, x and w 16-byte
// aligned, sizes positive.
bool skinny_gemm_supported(const SkinnyGemmArgs& args);

// The plan for args (tuning fields 0 are chosen here).
SkinnyGemmPlan skinny_gemm_plan(const SkinnyGemmArgs& args);

cudaError_t skinny_gemm(const SkinnyGemmArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda
