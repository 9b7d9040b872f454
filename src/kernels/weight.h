// WeightMatrix: a [rows = out features, cols = in features] matrix in one of the stored
// formats the kernels read directly (no up-front conversion): f32, bf16, f16, or MLX
// affine quantization (uint32-packed q, per-group scales and biases).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace hearth::kernels {

struct WeightMatrix {
  DType dtype = DType::kF32;  // kF32, kBF16, kF16, or kU32 (quantized)
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;  // [rows, cols], or packed [rows, cols * bits / 32] uint32
  // Quantized only: w[r, c] = scales[r, c / group_size] * q[r, c] + biases[r, c / group_size]
  // with q packed little-endian, element 0 of each word in its lowest bits.
  int bits = 0;
  int group_size = 0;
  DType scale_dtype = DType::kF32;  // kF32, kBF16 or kF16
  const void* scales = nullptr;     // [rows, cols / group_size]
  const void* biases = nullptr;     // [rows, cols / group_size]
  // CPU int8 path (kernels/cpu/int8_dot.h, interleave_rows16): the codes, scales
  // and biases interleaved by 16 rows for the batch-invariant decode (and the GEMM, which then
  // reads no w.data); null when not prepared. A model that prepared them may have released
  // the row-major codes, scales and biases: data, scales and biases null (cpu::weight_rows_f32,
  // a tied embedding's gather, then reads rows from the rows16 copy).
  const void* rows16 = nullptr;         // [ceil(rows / 16), row bytes / 4, 16, 4] bytes
  const void* rows16_scales = nullptr;  // [ceil(rows / 16), groups, 16] in scale_dtype
  const void* rows16_biases = nullptr;  // [ceil(rows / 16), groups, 16] in scale_dtype
  // CPU batch invariance, float weights (kernels/cpu/gemm_dense.h, interleave_panels16): the
  // matrix in its own dtype with 16 rows interleaved, [ceil(rows / 16), cols, 16] (rows past
  // `rows` zero), which the invariant GEMM and decode read instead of data; null when not
  // prepared. data stays valid (its file pages may have been dropped).
  const void* panels16 = nullptr;

  bool quantized() const { return bits != 0; }
};

// Reads one (scale or bias) element of a quantized matrix's side tensors.
inline float read_scalar(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[index]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[index]);
    default:
      return static_cast<const float*>(base)[index];
  }
}

// One sequence of a paged-attention call (mirrors models' SequenceSlice).
struct AttentionSequence {
  int32_t first_token = 0;
  int32_t num_tokens = 0;
  int32_t num_cached = 0;
  const int32_t* block_table = nullptr;
};

// Paged attention over KV caches laid out [num_blocks, block_size, num_kv_heads, head_dim].
struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim]
  float* out = nullptr;      // [num_tokens, num_heads, head_dim]
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  float scale = 1.0f;
  int window = 0;  // 0: full causal; else a query at slot i sees keys i - window < j <= i
  const AttentionSequence* sequences = nullptr;
  int num_sequences = 0;
};

}  // namespace hearth::kernels
