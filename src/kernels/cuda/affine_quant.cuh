// MLX-affine quantized weights (4 or 8 bits, groups of 32/64/128 along k):
// w[n, i] = scale[n, i / g] * q[n, i] + bias[n, i / g], q packed low bits first into
// uint32 words. A GEMV for decode (m <= 8 rows) that dequantizes in registers, with the
// decode step's fusions (RMSNorm prologue, residual-add / gated epilogues, programmatic
// dependent launch) as in gemv_bf16, and a dequantize-to-bf16 pass that prefill uses ahead
// of the cuBLASLt GEMM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemv_bf16.cuh"  // GemvEpilogue

namespace hearth::cuda {

// How a quantized weight's bytes lie on the device. kRowMajor: MLX's (packed rows of k * bits
// / 32 words; scales and biases [n, k / group_size]). The tiled layouts (affine_tile) serve
// the tensor-core GEMV only, and affine_dequantize: per 16-row tile and 256-value chunk one
// block of 2 KB of weights in the mma's lane order (each warp's chunk is 4 coalesced 512-byte
// loads) followed by the chunk's scales and biases, with the tile's rows those of one GEMV
// family: kTiledPlain 16 consecutive rows; kTiledGated 8 gate rows j and their up rows
// n / 2 + j; kTiledRope 8 RoPE pairs (rows i and i + head_dim / 2 of a head).
enum class AffineLayout { kRowMajor, kTiledPlain, kTiledGated, kTiledRope };

struct AffineQuantWeight {
  const uint32_t* packed = nullptr;  // [n, k * bits / 32]; tiled: the whole tiled image
  const void* scales = nullptr;      // [n, k / group_size], bf16 or f16; tiled: unused
  const void* biases = nullptr;      // [n, k / group_size], same type as scales; tiled: unused
  bool f16_scales = false;           // false: bf16
  int n = 0;
  int k = 0;
  int bits = 4;         // 4 or 8
  int group_size = 64;  // 32, 64 or 128; divides k
  AffineLayout layout = AffineLayout::kRowMajor;
  int tile_head_dim = 0;  // kTiledRope: the head size its pairs were taken in
};

// Whether w (row-major) can be relaid as `layout` (4 bits, groups of 64 or 128, k % 256 == 0;
// gated: n even; RoPE: head_dim even and dividing n).
bool affine_tiling_supported(const AffineQuantWeight& w, AffineLayout layout, int head_dim);
// Bytes of w relaid as `layout` (the weights plus scales and biases; a partial last tile is
// padded with copies of its last row).
size_t affine_tiled_bytes(const AffineQuantWeight& w, AffineLayout layout);
// dst (16-byte aligned, affine_tiled_bytes) = w relaid as `layout`; affine_tiled_view gives
// the weight that reads it.
cudaError_t affine_tile(const AffineQuantWeight& w, AffineLayout layout, int head_dim, void* dst,
                        cudaStream_t stream);
// w as affine_tile relaid it into `tiled`: packed = tiled, no separate scales or biases.
inline AffineQuantWeight affine_tiled_view(const AffineQuantWeight& w, AffineLayout layout,
                                           int head_dim, const void* tiled) {
  AffineQuantWeight t = w;
  t.packed = static_cast<const uint32_t*>(tiled);
  t.scales = nullptr;
  t.biases = nullptr;
  t.layout = layout;
  t.tile_head_dim = head_dim;
  return t;
}

constexpr int kAffineGemvMaxRows = 8;

// y[m, n] = x[m, k] · wᵀ with m <= kAffineGemvMaxRows; x rows 16-byte aligned (ldx % 8 == 0).
// y is bf16, or f32 when y_f32 (logits for the sampler). sm_count sizes the grid (the
// device's multiprocessor count). x is rounded to half per 16-byte weight chunk after
// scaling by a power of two and products are summed 8 at a time in half, f32 beyond:
// relative L2 error ~5e-4 against exact f32, ~3e-3 when one activation is ~1000x the rest
// of its chunk (tests/kernels/cuda/affine_quant_test.cpp).
cudaError_t affine_gemv(const AffineQuantWeight& w, const __nv_bfloat16* x, int64_t ldx, int m,
                        void* y, int64_t ldy, bool y_f32, int sm_count, cudaStream_t stream);

// Which GEMV kernel runs an AffineGemvArgs call. kTensorCore (affine_gemv_mma.cu): 4 bits,
// groups of 64 or 128, k % 256 == 0; each 16-row tile of weights is unpacked straight into
// bf16 mma fragments (128 + q, exact) against bf16 x, summed in f32 per 64 values, then
// s·(Σ(128 + q)·x - 128·Σx) + b·Σx: no half rounding of x. kRegister: the HFMA2 kernel
// below, any supported shape. kAuto picks kTensorCore where it applies.
enum class AffineGemvKernel { kAuto, kRegister, kTensorCore };

// The decode step's fused form, GemvArgs' contract on a quantized weight (no bias).
struct AffineGemvArgs {
  AffineQuantWeight w;               // [n, k]; [2n, k] (gate rows, then up) when gated
  const __nv_bfloat16* x = nullptr;  // [m, k] (ldx); the residual stream when norm_weight
  int64_t ldx = 0;
  void* y = nullptr;  // [m, n] (ldy), bf16 or f32
  int64_t ldy = 0;
  bool y_f32 = false;
  GemvEpilogue epilogue = GemvEpilogue::kStore;  // kResidualAdd / kGated*: bf16 y only,
                                                 // gated: m <= 4; kRopeKvWrite: the
                                                 // tensor-core kernel only, y unused
  // RMSNorm prologue: x is replaced by bf16(rmsnorm(x) * (norm_weight + norm_offset)), the
  // bits rmsnorm_residual(nullptr, ...) would write.
  const __nv_bfloat16* norm_weight = nullptr;  // [k]
  float norm_offset = 0.0f;
  float norm_eps = 1e-5f;
  int m = 0;
  int sm_count = 0;
  bool pdl = false;  // programmatic dependent launch (sm_90+ only): the first weight loads
                     // go out before the previous kernel finishes
  AffineGemvKernel kernel = AffineGemvKernel::kAuto;  // a tiled weight: the tensor-core one
  // Warps a tensor-core block of the fused qkv (kRopeKvWrite) or gated GEMV at one x row on
  // a tiled weight (other calls: 8): 8 or 16 force it (lab A/B); 0 picks 16 (one block a
  // multiprocessor) when that walks no more chunks a warp than 8 at two blocks (qkv's 384
  // tiles on 264 block slots), else 8. The warps' sums are added in another order at 16:
  // f32 reordering, so other bits than the row-major kernel's.
  int block_warps = 0;
  // kRopeKvWrite (GemvArgs::rope's contract): w is the fused q|k|v projection; each pair of
  // rows (i, i + head_dim / 2) of a head is rounded to bf16, rotated (q, k) and stored to
  // q_out / the K cache, or copied (v) to the V cache, as rope_kv_write would.
  RopeKvWriteArgs rope;
};

// kernel == kTensorCore: whether that kernel takes these args (kAuto / kRegister: whether
// some kernel does).
bool affine_gemv_supported(const AffineGemvArgs& args);
cudaError_t affine_gemv(const AffineGemvArgs& args, cudaStream_t stream);

// out[t, :] = dequantized row ids[t] of w (an MLX-quantized embedding table [vocab = n,
// hidden = k], row-major) times scale, rounded to bf16; ids outside [0, n) give zero rows.
cudaError_t affine_embedding_gather(const AffineQuantWeight& w, const int32_t* ids, int tokens,
                                    float scale, __nv_bfloat16* out, int64_t ld_out,
                                    cudaStream_t stream);

// out[n, k] (row stride ld_out) = the dequantized weight, rounded to bf16 (a tiled weight:
// the same bits, written from its tiles; ld_out % 8 == 0, out 16-byte aligned).
cudaError_t affine_dequantize(const AffineQuantWeight& w, __nv_bfloat16* out, int64_t ld_out,
                              cudaStream_t stream);

}  // namespace hearth::cuda
