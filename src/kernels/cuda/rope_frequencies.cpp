// Host computation of RoPE inverse frequencies, following the formulas of the papers as
// transformers implements them (its _compute_*_parameters functions are the oracle).
#include "kernels/cuda/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hearth::cuda {
namespace {

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// The dimension index at which a frequency completes `rotations` turns over max_position.
double yarn_correction_dim(double rotations, int dim, double theta, int max_position) {
  return dim * std::log(max_position / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(theta));
}

}  // namespace

Result<RopeTable> rope_frequencies(double theta, int rotary_dim, const RopeScaling& s) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0) {
    return invalid_argument_error("rotary dimension {} must be positive and even", rotary_dim);
  }
  if (theta <= 0.0) return invalid_argument_error("rope_theta {} must be positive", theta);
  if (s.type != RopeType::kDefault && s.factor <= 0.0) {
    return invalid_argument_error("rope scaling factor {} must be positive", s.factor);
  }
  int half = rotary_dim / 2;
  RopeTable table;
  table.inv_freq.resize(half);
  std::vector<double> base(half);
  for (int i = 0; i < half; ++i) base[i] = 1.0 / std::pow(theta, (2.0 * i) / rotary_dim);

  switch (s.type) {
    case RopeType::kDefault:
      for (int i = 0; i < half; ++i) table.inv_freq[i] = static_cast<float>(base[i]);
      break;
    case RopeType::kLinear:
      for (int i = 0; i < half; ++i) table.inv_freq[i] = static_cast<float>(base[i] / s.factor);
      break;
    case RopeType::kLlama3: {
      if (s.high_freq_factor == s.low_freq_factor) {
        return invalid_argument_error("llama3 rope: high_freq_factor equals low_freq_factor");
      }
      double low_wavelen = s.original_max_position / s.low_freq_factor;
      double high_wavelen = s.original_max_position / s.high_freq_factor;
      for (int i = 0; i < half; ++i) {
        double wavelen = 2.0 * std::numbers::pi / base[i];
        double f = base[i];
        if (wavelen > low_wavelen) {
          f = base[i] / s.factor;
        } else if (wavelen >= high_wavelen) {
          double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                          (s.high_freq_factor - s.low_freq_factor);
          f = (1.0 - smooth) * base[i] / s.factor + smooth * base[i];
        }
        table.inv_freq[i] = static_cast<float>(f);
      }
      break;
    }
    case RopeType::kYarn: {
      double attention = 1.0;
      if (s.attention_factor) {
        attention = *s.attention_factor;
      } else if (s.mscale && s.mscale_all_dim) {
        attention = yarn_mscale(s.factor, *s.mscale) / yarn_mscale(s.factor, *s.mscale_all_dim);
      } else {
        attention = yarn_mscale(s.factor, 1.0);
      }
      table.attention_scaling = static_cast<float>(attention);
      double low = yarn_correction_dim(s.beta_fast, rotary_dim, theta, s.original_max_position);
      double high = yarn_correction_dim(s.beta_slow, rotary_dim, theta, s.original_max_position);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(rotary_dim - 1));
      if (low == high) high += 0.001;
      for (int i = 0; i < half; ++i) {
        double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        double extrapolation = 1.0 - ramp;
        double interpolated = base[i] / s.factor;
        table.inv_freq[i] =
            static_cast<float>(interpolated * (1.0 - extrapolation) + base[i] * extrapolation);
      }
      break;
    }
  }
  return table;
}

}  // namespace hearth::cuda
