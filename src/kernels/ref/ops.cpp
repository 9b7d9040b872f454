// Reference ops: one loop nest per definition, double accumulation where a sum is long.
#include "kernels/ref/ops.h"

#include <cmath>
#include <vector>

namespace hearth::kernels::ref {

void weight_row(const WeightMatrix& w, int64_t r, float* out) {
  if (w.quantized()) {
    const auto* packed = static_cast<const uint32_t*>(w.data);
    const int64_t words_per_row = w.cols * w.bits / 32;
    const int per_word = 32 / w.bits;
    const uint32_t mask = (1u << w.bits) - 1u;
    const int64_t groups = w.cols / w.group_size;
    for (int64_t c = 0; c < w.cols; ++c) {
      uint32_t word = packed[r * words_per_row + c / per_word];
      uint32_t q = (word >> ((c % per_word) * w.bits)) & mask;
      int64_t g = r * groups + c / w.group_size;
      out[c] = read_scalar(w.scales, w.scale_dtype, g) * static_cast<float>(q) +
               read_scalar(w.biases, w.scale_dtype, g);
    }
    return;
  }
  for (int64_t c = 0; c < w.cols; ++c) out[c] = read_scalar(w.data, w.dtype, r * w.cols + c);
}

void linear(const WeightMatrix& w, const float* x, int64_t m, float* y) {
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    weight_row(w, r, row.data());
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(row[c]) * x[i * w.cols + c];
      y[i * w.rows + r] = static_cast<float>(acc);
    }
  }
}

void embedding(const WeightMatrix& w, const int32_t* tokens, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) weight_row(w, tokens[i], out + i * w.cols);
}

void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
              float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = x[r * dim + i] * inv * weight[i];
  }
}

void rope(float* x, const int32_t* positions, int64_t tokens, int heads, int head_dim,
          const float* inv_freq, float attention_factor) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        double angle = static_cast<double>(positions[t]) * inv_freq[i];
        float c = static_cast<float>(std::cos(angle)) * attention_factor;
        float s = static_cast<float>(std::sin(angle)) * attention_factor;
        float a = v[i];
        float b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t rows, int64_t dim, float* out) {
  for (int64_t i = 0; i < rows * dim; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void paged_attention(const PagedAttentionArgs& a) {
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t kv_stride = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  std::vector<double> scores;
  for (int s = 0; s < a.num_sequences; ++s) {
    const AttentionSequence& seq = a.sequences[s];
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      const int64_t token = seq.first_token + t;
      const int32_t slot = seq.num_cached + t;  // this query's own KV slot
      const int32_t first = a.window > 0 ? std::max(0, slot - a.window + 1) : 0;
      for (int h = 0; h < a.num_heads; ++h) {
        const int kvh = h / group;
        const float* q = a.q + (token * a.num_heads + h) * a.head_dim;
        scores.assign(static_cast<std::size_t>(slot - first + 1), 0.0);
        double max_score = -INFINITY;
        for (int32_t j = first; j <= slot; ++j) {
          const int64_t block = seq.block_table[j / a.block_size];
          const float* k =
              a.k_cache + (block * a.block_size + j % a.block_size) * kv_stride + kvh * a.head_dim;
          double dot = 0.0;
          for (int d = 0; d < a.head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
          scores[j - first] = dot * a.scale;
          max_score = std::max(max_score, scores[j - first]);
        }
        double total = 0.0;
        for (double& sc : scores) {
          sc = std::exp(sc - max_score);
          total += sc;
        }
        float* o = a.out + (token * a.num_heads + h) * a.head_dim;
        for (int d = 0; d < a.head_dim; ++d) {
          double acc = 0.0;
          for (int32_t j = first; j <= slot; ++j) {
            const int64_t block = seq.block_table[j / a.block_size];
            const float* v = a.v_cache + (block * a.block_size + j % a.block_size) * kv_stride +
                             kvh * a.head_dim;
            acc += scores[j - first] * v[d];
          }
          o[d] = static_cast<float>(acc / total);
        }
      }
    }
  }
}

}  // namespace hearth::kernels::ref
