// Rotary-embedding frequencies for each rope type transformers supports on the llama
// family (default, linear, dynamic NTK, yarn, llama3), computed the way
// transformers' modeling_rope_utils does.
#pragma once

#include <cstdint>
#include <vector>

#include "models/config.h"

namespace hearth {

struct RopeTables {
  std::vector<float> inv_freq;    // [head_dim / 2]
  float attention_factor = 1.0f;  // multiplies cos and sin (yarn)
};

// seq_len matters only for dynamic NTK: the longest sequence in the step (transformers
// rescales the base once the sequence outgrows max_position_embeddings).
RopeTables rope_tables(const ModelConfig& config, int64_t seq_len = 0);

}  // namespace hearth
