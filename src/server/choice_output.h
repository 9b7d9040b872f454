// One choice's text pipeline: decoded pieces -> stop matching -> <think> splitting ->
// tool-call parsing -> deltas (content, reasoning, tool calls) that each API renders in its
// own wire format, streamed or accumulated.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/reasoning_parser.h"
#include "text/stop_matcher.h"
#include "text/tool_calls.h"

namespace hearth::server {

struct ToolCallOut {
  std::string id;  // "call_..." (OpenAI) / "toolu_..." (Anthropic)
  std::string name;
  std::string arguments;  // JSON object text
};

struct OutputDelta {
  enum class Kind { kContent, kReasoning, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;  // kContent / kReasoning
  ToolCallOut call;  // kToolCall
  int tool_index = 0;
};

struct ChoiceOutputOptions {
  std::vector<std::string> stop;
  bool parse_reasoning = true;
  bool starts_in_reasoning = false;
  text::ToolCallFormat tool_format = text::ToolCallFormat::kNone;  // kNone: tools not offered
  std::string tool_id_prefix = "call_";
};

class ChoiceOutput {
 public:
  explicit ChoiceOutput(const ChoiceOutputOptions& options);

  // Feeds one token's text; appends the deltas it releases.
  void push(std::string_view piece, std::vector<OutputDelta>& out);
  // End of generation: releases everything held back.
  void finish(std::vector<OutputDelta>& out);

  bool stopped() const { return stop_.stopped(); }
  const std::string& matched_stop() const { return matched_stop_; }
  int tool_calls() const { return next_tool_index_; }

 private:
  void route(std::string_view text, std::vector<OutputDelta>& out);
  void content(std::vector<text::ToolCallEvent> events, std::vector<OutputDelta>& out);

  text::StopMatcher stop_;
  std::unique_ptr<text::ReasoningParser> reasoning_;
  std::unique_ptr<text::ToolCallParser> tools_;
  std::string tool_id_prefix_;
  std::string matched_stop_;
  int next_tool_index_ = 0;
  bool finished_ = false;
};

// A random id with the given prefix ("chatcmpl-", "call_", "msg_", "toolu_").
std::string random_id(std::string_view prefix, int length = 24);

}  // namespace hearth::server
