// Sampler: turns one row of logits into one token under a request's SamplingParams.
// One Sampler per request, owning that request's RNG, so a seeded request draws the same
// tokens whatever else shares its batch. Pipeline order is documented on sample().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace hearth::engine {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// Log-probabilities of the model's own distribution: log_softmax of the logits as the model
// produced them, before logit_bias, penalties, temperature and truncation (what OpenAI and
// vLLM report).
struct TokenLogprobs {
  int32_t token = 0;              // the sampled token
  float logprob = 0.0f;           // its log-probability
  int64_t rank = 0;               // 1 + number of tokens strictly more likely than it
  std::vector<TokenLogprob> top;  // the params.logprobs most likely tokens, most likely first
};

// A counter-based, platform-independent RNG (SplitMix64): the same seed gives the same
// stream on every compiler and standard library.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double next_unit();  // uniform in [0, 1), 53 random bits

 private:
  uint64_t state_;
};

class Sampler {
 public:
  // Unseeded params draw a seed from std::random_device.
  explicit Sampler(const SamplingParams& params);

  // Samples one token from `logits` ([vocab], modified in place: it ends up holding the
  // processed logits). Steps, in order:
  //   1. logprobs (if requested) from the untouched logits;
  //   2. logit_bias; 3. repetition penalty over prompt + output tokens;
  //   4. presence / frequency penalties over output tokens;
  //   5. greedy: argmax (lowest id on ties) — done; otherwise
  //   6. softmax(logits / temperature); 7. top-k; 8. top-p; 9. min-p; 10. XTC;
  //   11. one draw from the renormalized kept set (scanned in token-id order).
  int32_t sample(std::span<float> logits, std::span<const int32_t> prompt_tokens,
                 std::span<const int32_t> output_tokens, TokenLogprobs* out = nullptr);

  // Same, with every context token treated as output (presence/frequency see them all).
  int32_t sample(std::span<float> logits, std::span<const int32_t> context_tokens,
                 TokenLogprobs* out = nullptr) {
    return sample(logits, {}, context_tokens, out);
  }

  // The normalized [vocab] distribution the draw of step 11 uses, for already-processed
  // logits (steps 6-10; greedy gives a one-hot row). `xtc_fires` stands for the XTC coin.
  static std::vector<float> distribution(const SamplingParams& params,
                                         std::span<const float> logits, bool xtc_fires);

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }

 private:
  void apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> prompt_tokens,
                                std::span<const int32_t> output_tokens);
  int32_t sample_from_distribution(std::span<const float> logits);

  SamplingParams params_;
  uint64_t seed_;
  SamplerRng rng_;
  std::vector<int32_t> kept_;    // scratch: candidate token ids
  std::vector<float> probs_;     // scratch: [vocab] probabilities
  std::vector<int32_t> counts_;  // scratch: [vocab] occurrence counts, zeroed after use
};

// Log-probabilities of `logits` ([vocab]) for the chosen token and the top `n` alternatives.
TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t chosen, int n);

}  // namespace hearth::engine
