// One generation request as every API route sees it after parsing: chat messages (already
// in the OpenAI shape chat templates expect) or a raw prompt, tools, sampling, stops and
// output options. Parsers for each API fill it; the generation job runs it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"

namespace hearth::server {

enum class ApiKind { kChatCompletions, kCompletions, kResponses, kMessages };

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct GenerationRequest {
  ApiKind api = ApiKind::kChatCompletions;
  std::string model;  // as the client sent it

  // Chat routes: messages for the template. Completions: `prompt` text or `prompt_ids`.
  nlohmann::json messages;  // array, or null for completions
  std::string prompt;
  std::vector<int32_t> prompt_ids;

  nlohmann::json tools;  // array of {"type":"function","function":{...}}, or null
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed

  nlohmann::json template_kwargs = nlohmann::json::object();  // chat_template_kwargs
  std::optional<bool> enable_thinking;  // request's wish; server default applies if unset

  engine::SamplingParams sampling;
  bool temperature_set = false, top_p_set = false, top_k_set = false;
  std::optional<int> max_tokens;  // unset: the rest of the context (or --max-tokens)

  std::vector<std::string> stop;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  bool echo = false;  // completions: prepend the prompt
};

// Parsers: throw ApiException naming the field on any invalid input.
GenerationRequest parse_chat_completions(const nlohmann::json& body);
GenerationRequest parse_completions(const nlohmann::json& body);
GenerationRequest parse_messages(const nlohmann::json& body);
GenerationRequest parse_responses(const nlohmann::json& body);

// Shared by the parsers: OpenAI tool definitions ({"type":"function","function":{..}}).
nlohmann::json parse_openai_tools(const nlohmann::json& tools, const std::string& field);

}  // namespace hearth::server
