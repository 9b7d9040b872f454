// Tool calls in each model family's native output format, parsed into name + JSON
// arguments for OpenAI tool_calls and Anthropic tool_use. Streaming: text outside a call
// passes through at once (a partial marker is held back); a call is emitted when its block
// closes. A block that does not parse degrades to plain text, never an error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth::text {

enum class ToolCallFormat {
  kNone,        // no parsing: everything is text
  kHermes,      // Qwen 2.5/3, Hermes: <tool_call>{"name":..,"arguments":{..}}</tool_call>
  kLlama3Json,  // Llama 3.x: {"name":..,"parameters":{..}} (optionally after <|python_tag|>)
  kMistral,     // [TOOL_CALLS][{"name":..,"arguments":{..}}] or [TOOL_CALLS]name[ARGS]{..}
  kDeepSeekV3,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>...<｜tool▁calls▁end｜>
};

std::string_view tool_call_format_name(ToolCallFormat format);

// Picks the format a chat template teaches its model (by the markers it mentions);
// kHermes when the template names none (the most common convention).
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

// The marker strings a format uses: a detokenizer must keep them even when they are
// special tokens that skip_special_tokens would drop.
std::vector<std::string> tool_call_markers(ToolCallFormat format);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // compact JSON text of an object
};

struct ToolCallEvent {
  bool is_call = false;
  std::string text;     // when !is_call
  ParsedToolCall call;  // when is_call
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format);

  std::vector<ToolCallEvent> push(std::string_view text);
  // End of output: an unterminated block is parsed if it can be, else released as text.
  std::vector<ToolCallEvent> finish();

 private:
  void emit_text(std::vector<ToolCallEvent>& out, std::string_view text);
  void close_block(std::vector<ToolCallEvent>& out, bool at_end);

  ToolCallFormat format_;
  std::string start_;
  std::string end_;  // empty: the block runs to the end of the output
  std::string pending_;
  std::string block_;  // the raw block, markers included
  bool in_block_ = false;
  bool at_start_ = true;  // Llama: only whitespace seen so far
};

// Parses one complete block (markers included) of `format`. Empty on failure.
std::vector<ParsedToolCall> parse_tool_call_block(ToolCallFormat format, std::string_view block);

}  // namespace hearth::text
