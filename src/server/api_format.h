// Wire formats of the generation routes. One ApiFormatter per request renders the neutral
// choice deltas and results as OpenAI chat/completions chunks, Anthropic message events or
// Responses events (streaming), or as the API's whole JSON object (non-streaming).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/choice_output.h"
#include "server/generation_request.h"

namespace hearth::server {

struct LogprobEntry {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

struct ChoiceResult {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallOut> calls;
  std::string finish;         // "stop", "length", "tool_calls", "error"
  std::string stop_sequence;  // the stop string that ended it, if any
  std::vector<LogprobEntry> logprobs;
  int completion_tokens = 0;
};

struct UsageInfo {
  int prompt_tokens = 0;
  int cached_tokens = 0;
  int completion_tokens = 0;
};

struct FormatContext {
  std::string id;     // response id
  std::string model;  // the served model id
  int64_t created = 0;
  std::string echo;  // completions echo: the prompt text
};

class ApiFormatter {
 public:
  virtual ~ApiFormatter() = default;
  virtual ApiFlavor flavor() const = 0;

  // Streaming: bytes for the SSE body.
  virtual std::string stream_begin(int prompt_tokens) = 0;
  virtual std::string stream_delta(int choice, const OutputDelta& delta,
                                   std::vector<LogprobEntry> logprobs) = 0;
  virtual std::string stream_finish(int choice, const ChoiceResult& result,
                                    std::vector<LogprobEntry> logprobs) = 0;
  virtual std::string stream_end(const std::vector<ChoiceResult>& results,
                                 const UsageInfo& usage) = 0;
  virtual std::string stream_error(const ApiError& error) = 0;

  // Non-streaming: the whole response object.
  virtual nlohmann::json complete(const std::vector<ChoiceResult>& results,
                                  const UsageInfo& usage) = 0;
};

std::unique_ptr<ApiFormatter> make_formatter(const GenerationRequest& request,
                                             FormatContext context);

// SSE framing.
std::string sse_data(const nlohmann::json& payload);
std::string sse_event(std::string_view event, const nlohmann::json& payload);
std::string dump_json(const nlohmann::json& value);

}  // namespace hearth::server
