// What the HTTP layer needs from one loaded model: its tokenizer and chat template, and a
// way to run generations that report tokens back through a non-blocking sink. The server
// speaks only this interface; EngineBackend implements it over the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "text/tool_calls.h"

namespace hearth::server {

struct StreamToken {
  int32_t id = 0;
  std::string text;  // the bytes this token completes (may be empty mid UTF-8 sequence)
  std::optional<engine::TokenLogprobs> logprobs;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };

struct GenerationOutcome {
  FinishReason reason = FinishReason::kStop;
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache
  int completion_tokens = 0;
  Status status;  // set when reason == kError
};

// Called on the engine thread; implementations must not block.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void on_tokens(std::vector<StreamToken> tokens) = 0;
  virtual void on_finish(const GenerationOutcome& outcome) = 0;
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual const std::string& id() const = 0;  // the name /v1/models lists
  virtual int64_t created() const = 0;        // unix seconds the model was loaded
  virtual int context_length() const = 0;     // max prompt + completion tokens
  virtual int32_t vocab_size() const = 0;
  virtual text::ToolCallFormat tool_call_format() const = 0;
  virtual bool has_chat_template() const = 0;

  // The chat template applied as transformers' apply_chat_template would.
  virtual Result<std::string> render_chat(const nlohmann::json& messages,
                                          const nlohmann::json& tools, bool add_generation_prompt,
                                          const nlohmann::json& kwargs) const = 0;
  virtual Result<std::vector<int32_t>> tokenize(std::string_view text,
                                                bool add_special_tokens) const = 0;
  virtual Result<std::string> detokenize(std::span<const int32_t> ids,
                                         bool skip_special_tokens) const = 0;

  // Starts a generation; admission errors come back here. Returns an id for cancel().
  virtual Result<uint64_t> submit(std::vector<int32_t> prompt, const engine::SamplingParams& params,
                                  std::shared_ptr<GenerationSink> sink) = 0;
  // Stops a generation at once (its sink still gets on_finish). Thread-safe, non-blocking.
  virtual void cancel(uint64_t request_id) = 0;

  // Engine counters for /stats (a JSON object) and /metrics.
  virtual nlohmann::json stats() const = 0;
};

}  // namespace hearth::server
