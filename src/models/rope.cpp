// Rope frequency tables (see rope.h).
#include "models/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hearth {
namespace {

std::vector<double> default_inv_freq(double base, int dim) {
  std::vector<double> inv(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) inv[i] = 1.0 / std::pow(base, (2.0 * i) / dim);
  return inv;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

RopeTables rope_tables(const ModelConfig& config, int64_t seq_len) {
  const RopeConfig& rope = config.rope;
  const int dim = config.head_dim;
  RopeTables out;
  std::vector<double> inv;
  switch (rope.type) {
    case RopeType::kDefault:
      inv = default_inv_freq(rope.theta, dim);
      break;
    case RopeType::kLinear:
      inv = default_inv_freq(rope.theta, dim);
      for (double& f : inv) f /= rope.factor;
      break;
    case RopeType::kDynamic: {
      const double max_pos = config.max_position_embeddings;
      const double len = std::max<double>(static_cast<double>(seq_len), max_pos);
      const double base = rope.theta * std::pow(rope.factor * len / max_pos - (rope.factor - 1.0),
                                                static_cast<double>(dim) / (dim - 2));
      inv = default_inv_freq(base, dim);
      break;
    }
    case RopeType::kLlama3: {
      inv = default_inv_freq(rope.theta, dim);
      const double old_len = rope.original_max_position_embeddings;
      const double low_wavelen = old_len / rope.low_freq_factor;
      const double high_wavelen = old_len / rope.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= rope.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_len / wavelen - rope.low_freq_factor) /
                                (rope.high_freq_factor - rope.low_freq_factor);
          f = (1.0 - smooth) * f / rope.factor + smooth * f;
        }
      }
      break;
    }
    case RopeType::kYarn: {
      const double factor = rope.factor;
      if (rope.attention_factor) {
        out.attention_factor = static_cast<float>(*rope.attention_factor);
      } else if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0 &&
                 *rope.mscale_all_dim != 0) {
        out.attention_factor = static_cast<float>(yarn_mscale(factor, *rope.mscale) /
                                                  yarn_mscale(factor, *rope.mscale_all_dim));
      } else {
        out.attention_factor = static_cast<float>(yarn_mscale(factor, 1.0));
      }
      const double base = rope.theta;
      const double orig = rope.original_max_position_embeddings;
      auto correction_dim = [&](double rotations) {
        return dim * std::log(orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
      };
      double low = correction_dim(rope.beta_fast);
      double high = correction_dim(rope.beta_slow);
      if (rope.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      inv.resize(static_cast<std::size_t>(dim / 2));
      for (int i = 0; i < dim / 2; ++i) {
        const double pos_freq = std::pow(base, (2.0 * i) / dim);
        const double extrapolation = 1.0 / pos_freq;
        const double interpolation = 1.0 / (factor * pos_freq);
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation_factor = 1.0 - ramp;
        inv[i] =
            interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor;
      }
      break;
    }
  }
  out.inv_freq.assign(inv.begin(), inv.end());
  return out;
}

}  // namespace hearth
