// Hopper bf16 GEMM for batched decode (up to 128 rows): y[m, n] = x[m, k] · w[n, k]ᵀ (+ y),
// f32 accumulation, in GemmBf16's layout. sm_90a only (wgmma + TMA); built into its own
// object library so no other architecture's image of it exists.
//
// The weights are the 64-row A operand of wgmma (yᵀ = w · xᵀ), so the row count m only sets
// the N side of the instruction (16/32/64/128 tokens) and no tensor-core work is spent on
// padding to 64 rows. A block owns tiles of 128 weight rows: two producer threads (one for
// the weights, one for x, each with its own cursor) stream each 64-wide k step of the tile
// (16 KB of weights) and of x through a ring of shared-memory stages with TMA (128-byte
// swizzle, mbarrier completion); two consumer warpgroups each run m64nNk16 wgmmas on their
// 64 rows, keeping one stage's wgmmas in flight while they issue the next. With fewer tiles
// than multiprocessors, clusters of 2-8 blocks split each tile's k steps and rank 0 adds the
// ranks' sums in order through distributed shared memory (when every cluster fits at once).
// Otherwise the grid (one block a multiprocessor, or the largest grid of >= 70 % of them
// whose ranges line up with tiles) splits the (tile, k step) iterations evenly between
// blocks ("stream-K"): a block may end or begin inside a tile; such a tile's partial sums go
// to f32 workspace slots and the last block to arrive sums them in k order (deterministic),
// then writes y. Under PDL the weight loads are issued without waiting on the previous
// kernel (only x waits).
// Status: opt-in (GemmBf16Options::wgmma). On the H200 at m = 64 it ran 0.70-1.02x cuBLASLt
// (S18, dev/cuda/NOTES.md): it streams faster a multiprocessor, but a split tile's reduction
// through L2 costs ~5-9 us, which the small shapes (qkv, o) cannot hide. Separate weight and
// x producers and one wgmma group in flight did not change that (S22-W1: qkv 18.5, o 16.4,
// gate_up 63.8, down 35.8, lm_head 267.5 us against cuBLASLt's 15.5, 11.4, 62.0, 34.8, 281.5).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hearth::cuda {

struct WgmmaGemmArgs {
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
  int grid = 0;  // blocks (0: the plan's choice; never more than the iterations)
  // 0: the plan picks; 1: stream-K; 2, 4 or 8: clusters of that many blocks split each
  // tile's k steps and add their sums through distributed shared memory (grid = tiles x it).
  int cluster = 0;
  bool pdl = false;  // programmatic dependent launch: weight loads overlap the previous kernel
  // Workspace (see wgmma_gemm_workspace): f32 partial slots, two a block, and one arrival
  // counter a tile (zero before the first call; every call leaves them zero).
  float* partials = nullptr;
  unsigned* counters = nullptr;
};

// The most rows (tokens) a call takes.
constexpr int kWgmmaMaxRows = 128;

struct WgmmaGemmPlan {
  int tokens = 0;  // wgmma N: m rounded up to 16, 32, 64 or 128
  int stages = 0;
  int tiles = 0;   // 128-row weight tiles
  int ksteps = 0;  // 64-wide k steps a tile
  int grid = 0;
  int cluster = 1;  // > 1: the cluster form (no workspace, no counters)
  size_t smem_bytes = 0;
  // Workspace the call may need: the stream-K form's (the cluster form needs none, but falls
  // back to stream-K when its clusters cannot all be resident at once).
  size_t partial_floats = 0;
  int counters = 0;  // = tiles
};

// True when the kernel takes the call: an sm_90 device (`cc_major` 9), 1 <= m <= 128, k, ldx
// and ldw multiples of 8, x and w 16-byte aligned, y 4-byte aligned (8 for f32), n >= 1.
bool wgmma_gemm_supported(const WgmmaGemmArgs& args, int cc_major);

WgmmaGemmPlan wgmma_gemm_plan(const WgmmaGemmArgs& args);

// Encodes the two tensor maps (host) and launches. Returns cudaErrorInvalidValue for an
// unsupported call and cudaErrorNotSupported when the driver has no tensor-map entry point.
cudaError_t wgmma_gemm(const WgmmaGemmArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda
