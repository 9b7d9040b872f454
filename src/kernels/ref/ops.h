// The plain, obviously-correct version of every op the llama-family forward uses. The
// fast CPU kernels (kernels/cpu) and the CUDA ones are tested against these; read them to
// learn what an op computes.
#pragma once

#include <cstdint>

#include "kernels/weight.h"

namespace hearth::kernels::ref {

// Row r of w as f32 (dequantized when quantized): out [w.cols].
void weight_row(const WeightMatrix& w, int64_t r, float* out);

// y[m, w.rows] = x[m, w.cols] · wᵀ
void linear(const WeightMatrix& w, const float* x, int64_t m, float* y);

// out[i, :] = row tokens[i] of the embedding table w [vocab, hidden]
void embedding(const WeightMatrix& w, const int32_t* tokens, int64_t n, float* out);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * weight; x and out [rows, dim] may alias.
void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
              float* out);

// In place, transformers' rotate-half layout: for each head, pairs (i, i + head_dim / 2)
// rotate by angle positions[t] * inv_freq[i]; then both scale by attention_factor.
// x [tokens, heads, head_dim], inv_freq [head_dim / 2].
void rope(float* x, const int32_t* positions, int64_t tokens, int heads, int head_dim,
          const float* inv_freq, float attention_factor);

// out[r, i] = silu(gate[r, i]) * up[r, i]; gate, up, out [rows, dim] (out may alias gate).
void silu_mul(const float* gate, const float* up, int64_t rows, int64_t dim, float* out);

// Causal (optionally windowed) softmax attention with GQA over a paged KV cache.
void paged_attention(const PagedAttentionArgs& args);

}  // namespace hearth::kernels::ref
