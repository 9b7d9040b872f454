// run_engine_benchmark: the engine-level throughput measurement (N concurrent requests of
// fixed prompt and generation lengths, greedy, EOS ignored) that `hearth benchmark` and the
// server's benchmarks call; it measures through the real submit/sink path.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "engine/engine.h"

namespace hearth::engine {

struct EngineBenchmarkSpec {
  int num_requests = 8;        // submitted at once
  int prompt_tokens = 128;     // per request, random ids
  int generated_tokens = 128;  // per request (max_tokens, EOS ignored)
  bool shared_prompt = false;  // every request gets the same prompt (prefix-cache path)
  uint64_t seed = 0;           // for the random prompts
};

struct EngineBenchmarkResult {
  int num_requests = 0;
  int64_t prompt_tokens = 0;     // submitted, all requests
  int64_t cached_tokens = 0;     // of which served from the prefix cache
  int64_t generated_tokens = 0;  // all requests
  double wall_s = 0;             // first submit to last finish
  double ttft_ms_median = 0;     // submit to first token
  double ttft_ms_max = 0;
  double output_tokens_per_s = 0;  // generated / wall
  double decode_tokens_per_s = 0;  // tokens after the first / (last finish - median first token)
  // Tokens per second over the steps in which every request was decoding: from the step that
  // gave the last request its first token to the step that finished the first request. Those
  // steps hold no prefill and a full batch (llama-batched-bench's S_TG condition). 0 when the
  // window holds fewer than 2 steps.
  double full_batch_decode_tokens_per_s = 0;
};

// Runs the spec on `engine` (which must be otherwise idle for meaningful figures).
Result<EngineBenchmarkResult> run_engine_benchmark(Engine& engine, const EngineBenchmarkSpec& spec);

}  // namespace hearth::engine
