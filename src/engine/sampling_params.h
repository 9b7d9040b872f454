// SamplingParams: everything one request asks of the sampler and the engine's stop logic.
// The server and the `generate` verb fill it from flags or request bodies; the engine keeps
// one per request, so every row of a batch samples with its own parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"

namespace hearth::engine {

struct SamplingParams {
  // 0 = greedy (argmax after logit_bias and penalties); otherwise logits are divided by it.
  float temperature = 1.0f;
  // Keep the smallest most-probable set whose probability mass reaches top_p (1 = off).
  float top_p = 1.0f;
  // Keep the top_k most probable tokens (0 = off).
  int top_k = 0;
  // Keep tokens whose probability is at least min_p times the top token's (0 = off).
  float min_p = 0.0f;
  // XTC ("exclude top choices"): with probability xtc_probability, when two or more tokens
  // have probability >= xtc_threshold, drop all of them but the least probable one.
  float xtc_probability = 0.0f;
  float xtc_threshold = 0.1f;
  // CTRL-style: a logit of a token already in the prompt or output is divided by the
  // penalty when positive, multiplied when negative (1 = off).
  float repetition_penalty = 1.0f;
  // OpenAI-style, over the generated tokens only:
  // logit -= presence_penalty * [count > 0] + frequency_penalty * count.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // (token id, bias) pairs added to the logits before anything else.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Same seed, same logits -> same tokens. Unseeded requests draw a seed from the OS.
  std::optional<uint64_t> seed;
  // -1: no logprobs; N >= 0: the sampled token's logprob plus the N most likely tokens.
  int logprobs = -1;
  // Generation stops after this many tokens (finish reason "length").
  int max_tokens = 512;
  // Besides the model's EOS ids (unless ignore_eos), these end generation (reason "stop").
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;

  // True when sampling is deterministic argmax (temperature 0 or top_k 1).
  bool is_greedy() const { return temperature == 0.0f || top_k == 1; }

  // Checks ranges; vocab_size > 0 also checks token ids in logit_bias and stop_token_ids.
  Status validate(int32_t vocab_size = 0) const;
};

}  // namespace hearth::engine
