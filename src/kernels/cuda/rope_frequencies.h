// RoPE inverse frequencies for every scaling type transformers ships for our families
// (default, linear, llama3, yarn), computed once on the host and uploaded; the kernel then
// only needs angle = position * inv_freq[i].
#pragma once

#include <optional>
#include <vector>

#include "base/status.h"

namespace hearth::cuda {

enum class RopeType { kDefault, kLinear, kLlama3, kYarn };

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position = 8192;  // llama3 and yarn
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  std::optional<double> attention_factor;
  bool truncate = true;
};

struct RopeTable {
  std::vector<float> inv_freq;     // [rotary_dim / 2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (yarn's mscale)
};

// theta: rope_theta; rotary_dim: the rotated part of each head (even, <= head_dim).
Result<RopeTable> rope_frequencies(double theta, int rotary_dim, const RopeScaling& scaling);

}  // namespace hearth::cuda
