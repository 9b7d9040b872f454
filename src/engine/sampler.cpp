// Sampler implementation. Truncation works on unnormalized probabilities p_i =
// exp((l_i - l_max) / T), so the top token has p = 1 and min-p is a plain threshold; only
// the final draw and top-p need the sum. Full-vocab sorts are avoided: top-k and top-p select
// a growing prefix with nth_element, which matters at vocab sizes of 150k.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "base/check.h"

namespace hearth::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool finite(float x) { return std::isfinite(x); }

// More probable first; the lower id first on ties, so every order is total and repeatable.
struct ByProbDesc {
  const float* probs;
  bool operator()(int32_t a, int32_t b) const {
    return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
  }
};

// The lowest id holding the maximum of NaN-free logits. A compare-and-keep-index loop is
// one long dependency chain; eight independent running maxima (which the compiler turns
// into one vector register) and a second scan for the first index of the max are several
// times faster at vocab sizes of 100k+, and this runs once per greedy row per step.
int32_t argmax(std::span<const float> logits) {
  constexpr size_t kLanes = 8;
  const size_t n = logits.size();
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, logits[0]);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lane_max[k] = std::max(lane_max[k], logits[i + k]);
  }
  float best = *std::max_element(lane_max, lane_max + kLanes);
  for (; i < n; ++i) best = std::max(best, logits[i]);
  for (size_t j = 0; j < n; ++j) {
    if (logits[j] == best) return static_cast<int32_t>(j);
  }
  return 0;
}

// The candidate set after truncation. `sparse` = the kept ids are listed in `kept`
// (most probable first); otherwise every id with probs[id] > 0 is kept.
struct Candidates {
  std::vector<float>& probs;  // [vocab] unnormalized, top token = 1
  std::vector<int32_t>& kept;
  bool sparse = false;

  double mass() const {
    double sum = 0;
    if (sparse) {
      for (int32_t id : kept) sum += probs[id];
    } else {
      for (float p : probs) sum += p;
    }
    return sum;
  }

  // Lists the `k` most probable ids of the whole vocab into `kept`, sorted.
  void select_top(int64_t k) {
    int64_t vocab = static_cast<int64_t>(probs.size());
    k = std::min(k, vocab);
    kept.resize(static_cast<size_t>(vocab));
    std::iota(kept.begin(), kept.end(), 0);
    ByProbDesc cmp{probs.data()};
    if (k < vocab) std::nth_element(kept.begin(), kept.begin() + k, kept.end(), cmp);
    kept.resize(static_cast<size_t>(k));
    std::sort(kept.begin(), kept.end(), cmp);
    sparse = true;
  }

  void top_k(int k) {
    if (k <= 0 || k >= static_cast<int64_t>(probs.size())) return;
    if (sparse) {
      if (static_cast<int64_t>(kept.size()) > k) kept.resize(static_cast<size_t>(k));
      return;
    }
    select_top(k);
  }

  // Keeps the smallest most-probable prefix whose share of the kept mass reaches top_p.
  void top_p(float top_p) {
    if (top_p >= 1.0f) return;
    double total = mass();
    double target = static_cast<double>(top_p) * total;
    if (!sparse) {
      // Grow the sorted prefix until it holds the target mass (or is the whole vocab).
      int64_t vocab = static_cast<int64_t>(probs.size());
      for (int64_t k = std::min<int64_t>(64, vocab);; k = std::min(k * 8, vocab)) {
        select_top(k);
        double prefix = 0;
        for (int32_t id : kept) prefix += probs[id];
        if (prefix >= target || k == vocab) break;
      }
    }
    double cumulative = 0;
    size_t keep = 0;
    while (keep < kept.size()) {
      cumulative += probs[kept[keep]];
      ++keep;
      if (cumulative >= target) break;
    }
    kept.resize(std::max<size_t>(keep, 1));
  }

  // Keeps ids with p >= min_p * p_max; p_max is 1 by construction and always kept.
  void min_p(float min_p) {
    if (min_p <= 0.0f) return;
    if (sparse) {
      std::erase_if(kept, [&](int32_t id) { return probs[id] < min_p; });
      return;
    }
    kept.clear();
    for (int32_t id = 0; id < static_cast<int32_t>(probs.size()); ++id) {
      if (probs[id] >= min_p) kept.push_back(id);
    }
    std::sort(kept.begin(), kept.end(), ByProbDesc{probs.data()});
    sparse = true;
  }

  // Drops every token at or above `threshold` (normalized) except the least probable one.
  void xtc(float threshold) {
    double cutoff = static_cast<double>(threshold) * mass();
    std::vector<int32_t> above;
    if (sparse) {
      for (int32_t id : kept) {
        if (probs[id] >= cutoff) above.push_back(id);
      }
    } else {
      for (int32_t id = 0; id < static_cast<int32_t>(probs.size()); ++id) {
        if (probs[id] > 0 && probs[id] >= cutoff) above.push_back(id);
      }
      std::sort(above.begin(), above.end(), ByProbDesc{probs.data()});
    }
    if (above.size() < 2) return;
    above.pop_back();  // the least probable of them stays
    if (sparse) {
      kept.erase(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(above.size()));
    } else {
      for (int32_t id : above) probs[id] = 0.0f;
    }
  }
};

// Fills `probs` with exp((l - max) / T) and applies the truncation steps in order.
Candidates truncate(const SamplingParams& params, std::span<const float> logits,
                    std::vector<float>& probs, std::vector<int32_t>& kept, bool xtc_fires) {
  float max_logit = kNegInf;
  for (float l : logits) max_logit = std::max(max_logit, l);
  float inv_t = 1.0f / params.temperature;
  probs.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    probs[i] = logits[i] == kNegInf ? 0.0f : std::exp((logits[i] - max_logit) * inv_t);
  }
  Candidates c{probs, kept};
  c.top_k(params.top_k);
  c.top_p(params.top_p);
  c.min_p(params.min_p);
  if (xtc_fires) c.xtc(params.xtc_threshold);
  return c;
}

}  // namespace

Status SamplingParams::validate(int32_t vocab_size) const {
  if (!finite(temperature) || temperature < 0) {
    return invalid_argument_error("temperature must be >= 0, got {}", temperature);
  }
  if (!(top_p > 0 && top_p <= 1)) {
    return invalid_argument_error("top_p must be in (0, 1], got {}", top_p);
  }
  if (top_k < 0) return invalid_argument_error("top_k must be >= 0 (0 = off), got {}", top_k);
  if (!(min_p >= 0 && min_p <= 1)) {
    return invalid_argument_error("min_p must be in [0, 1], got {}", min_p);
  }
  if (!(xtc_probability >= 0 && xtc_probability <= 1)) {
    return invalid_argument_error("xtc_probability must be in [0, 1], got {}", xtc_probability);
  }
  if (!(xtc_threshold >= 0 && xtc_threshold <= 1)) {
    return invalid_argument_error("xtc_threshold must be in [0, 1], got {}", xtc_threshold);
  }
  if (!finite(repetition_penalty) || repetition_penalty <= 0) {
    return invalid_argument_error("repetition_penalty must be > 0, got {}", repetition_penalty);
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    return invalid_argument_error("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    return invalid_argument_error("frequency_penalty must be in [-2, 2], got {}",
                                  frequency_penalty);
  }
  if (logprobs < -1) return invalid_argument_error("logprobs must be >= 0, got {}", logprobs);
  if (max_tokens < 1) return invalid_argument_error("max_tokens must be >= 1, got {}", max_tokens);
  for (const auto& [id, bias] : logit_bias) {
    if (!finite(bias)) return invalid_argument_error("logit_bias for token {} is not finite", id);
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return invalid_argument_error("logit_bias token id {} is outside the vocabulary (size {})",
                                    id, vocab_size);
    }
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return invalid_argument_error("stop token id {} is outside the vocabulary (size {})", id,
                                    vocab_size);
    }
  }
  if (vocab_size > 0 && logprobs > vocab_size) {
    return invalid_argument_error("logprobs {} exceeds the vocabulary size {}", logprobs,
                                  vocab_size);
  }
  return ok_status();
}

uint64_t SamplerRng::next_u64() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SamplerRng::next_unit() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

namespace {
uint64_t pick_seed(const SamplingParams& params) {
  if (params.seed) return *params.seed;
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}
}  // namespace

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(pick_seed(params)), rng_(seed_) {}

void Sampler::apply_bias_and_penalties(std::span<float> logits,
                                       std::span<const int32_t> prompt_tokens,
                                       std::span<const int32_t> output_tokens) {
  int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocab; };
  for (const auto& [id, bias] : params_.logit_bias) {
    if (in_vocab(id)) logits[id] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    // Each distinct token is penalized once; `seen` marks are cleared afterwards.
    std::vector<int32_t>& seen = counts_;
    seen.resize(static_cast<size_t>(vocab), 0);
    float penalty = params_.repetition_penalty;
    for (auto tokens : {prompt_tokens, output_tokens}) {
      for (int32_t id : tokens) {
        if (!in_vocab(id) || seen[id]) continue;
        seen[id] = 1;
        logits[id] = logits[id] > 0 ? logits[id] / penalty : logits[id] * penalty;
      }
    }
    for (auto tokens : {prompt_tokens, output_tokens}) {
      for (int32_t id : tokens) {
        if (in_vocab(id)) seen[id] = 0;
      }
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    std::vector<int32_t>& counts = counts_;
    counts.resize(static_cast<size_t>(vocab), 0);
    for (int32_t id : output_tokens) {
      if (in_vocab(id)) ++counts[id];
    }
    for (int32_t id : output_tokens) {
      if (!in_vocab(id) || counts[id] == 0) continue;
      logits[id] -=
          params_.presence_penalty + params_.frequency_penalty * static_cast<float>(counts[id]);
      counts[id] = 0;  // applied once; also leaves the scratch zeroed
    }
  }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt_tokens,
                        std::span<const int32_t> output_tokens, TokenLogprobs* out) {
  HEARTH_CHECK(!logits.empty(), "sampling from an empty logit row");
  for (float& l : logits) l = std::isnan(l) ? kNegInf : l;  // branch-free: vectorizes
  std::vector<float> raw;
  if (out != nullptr) raw.assign(logits.begin(), logits.end());

  apply_bias_and_penalties(logits, prompt_tokens, output_tokens);
  int32_t token = params_.is_greedy() ? argmax(logits) : sample_from_distribution(logits);
  if (out != nullptr) *out = compute_logprobs(raw, token, std::max(params_.logprobs, 0));
  return token;
}

int32_t Sampler::sample_from_distribution(std::span<const float> logits) {
  float max_logit = *std::max_element(logits.begin(), logits.end());
  if (max_logit == kNegInf) return argmax(logits);  // everything masked: nothing to draw
  bool xtc_fires = params_.xtc_probability > 0 && rng_.next_unit() < params_.xtc_probability;
  Candidates c = truncate(params_, logits, probs_, kept_, xtc_fires);
  double u = rng_.next_unit() * c.mass();
  double cumulative = 0;
  int32_t last = -1;
  if (c.sparse) {
    std::sort(kept_.begin(), kept_.end());  // draw in id order: independent of sort details
    for (int32_t id : kept_) {
      cumulative += probs_[id];
      last = id;
      if (u < cumulative) return id;
    }
  } else {
    for (int32_t id = 0; id < static_cast<int32_t>(probs_.size()); ++id) {
      if (probs_[id] <= 0) continue;
      cumulative += probs_[id];
      last = id;
      if (u < cumulative) return id;
    }
  }
  HEARTH_CHECK(last >= 0, "empty candidate set");
  return last;  // u rounded up to the total mass
}

std::vector<float> Sampler::distribution(const SamplingParams& params,
                                         std::span<const float> logits, bool xtc_fires) {
  std::vector<float> probs;
  std::vector<int32_t> kept;
  SamplingParams p = params;
  if (p.temperature == 0.0f) p.top_k = 1;
  if (p.top_k == 1) p.temperature = 1.0f;
  Candidates c = truncate(p, logits, probs, kept, xtc_fires);
  std::vector<float> result(logits.size(), 0.0f);
  double total = c.mass();
  if (c.sparse) {
    for (int32_t id : kept) result[id] = static_cast<float>(probs[id] / total);
  } else {
    for (size_t i = 0; i < probs.size(); ++i) result[i] = static_cast<float>(probs[i] / total);
  }
  return result;
}

TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t chosen, int n) {
  HEARTH_CHECK(chosen >= 0 && chosen < static_cast<int64_t>(logits.size()));
  float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  float log_z = max_logit + static_cast<float>(std::log(sum));

  TokenLogprobs result;
  result.token = chosen;
  result.logprob = logits[chosen] - log_z;
  result.rank = 1;
  for (float l : logits) result.rank += l > logits[chosen] ? 1 : 0;

  int64_t count = std::min<int64_t>(n, static_cast<int64_t>(logits.size()));
  if (count > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    ByProbDesc cmp{logits.data()};
    std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), cmp);
    for (int64_t i = 0; i < count; ++i) {
      result.top.push_back({ids[i], logits[ids[i]] - log_z});
    }
  }
  return result;
}

}  // namespace hearth::engine
