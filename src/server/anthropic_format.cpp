// Anthropic Messages wire format: message_start, content_block_start/delta/stop per block
// (thinking, text, tool_use), message_delta with stop_reason and usage, message_stop.
#include "server/api_format.h"

namespace hearth::server {
namespace {

using nlohmann::json;

std::string stop_reason(const ChoiceResult& r) {
  if (r.finish == "tool_calls") return "tool_use";
  if (r.finish == "length") return "max_tokens";
  if (!r.stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

json parse_object(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_object() ? j : json::object();
}

class AnthropicFormatter : public ApiFormatter {
 public:
  explicit AnthropicFormatter(FormatContext c) : ctx_(std::move(c)) {}

  ApiFlavor flavor() const override { return ApiFlavor::kAnthropic; }

  std::string stream_begin(int prompt_tokens) override {
    json message = {{"id", ctx_.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", ctx_.model},
                    {"content", json::array()},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) +
           sse_event("ping", {{"type", "ping"}});
  }

  std::string stream_delta(int, const OutputDelta& d, std::vector<LogprobEntry>) override {
    std::string out;
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        if (open_ != Block::kThinking) {
          out += close_block();
          out += open_block(Block::kThinking,
                            {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        }
        out += block_delta({{"type", "thinking_delta"}, {"thinking", d.text}});
        break;
      case OutputDelta::Kind::kContent:
        if (open_ != Block::kText) {
          out += close_block();
          out += open_block(Block::kText, {{"type", "text"}, {"text", ""}});
        }
        out += block_delta({{"type", "text_delta"}, {"text", d.text}});
        break;
      case OutputDelta::Kind::kToolCall:
        out += close_block();
        out += open_block(Block::kToolUse, {{"type", "tool_use"},
                                            {"id", d.call.id},
                                            {"name", d.call.name},
                                            {"input", json::object()}});
        out += block_delta({{"type", "input_json_delta"}, {"partial_json", d.call.arguments}});
        out += close_block();
        break;
    }
    return out;
  }

  std::string stream_finish(int, const ChoiceResult&, std::vector<LogprobEntry>) override {
    return close_block();
  }

  std::string stream_end(const std::vector<ChoiceResult>& results,
                         const UsageInfo& usage) override {
    const ChoiceResult& r = results.at(0);
    json delta = {
        {"stop_reason", stop_reason(r)},
        {"stop_sequence", r.stop_sequence.empty() ? json(nullptr) : json(r.stop_sequence)}};
    return sse_event("message_delta", {{"type", "message_delta"},
                                       {"delta", delta},
                                       {"usage", {{"output_tokens", usage.completion_tokens}}}}) +
           sse_event("message_stop", {{"type", "message_stop"}});
  }

  std::string stream_error(const ApiError& e) override {
    return sse_event("error", json::parse(render_error(e, ApiFlavor::kAnthropic).body));
  }

  json complete(const std::vector<ChoiceResult>& results, const UsageInfo& usage) override {
    const ChoiceResult& r = results.at(0);
    json content = json::array();
    if (!r.reasoning.empty()) {
      content.push_back({{"type", "thinking"}, {"thinking", r.reasoning}, {"signature", ""}});
    }
    if (!r.content.empty() || r.calls.empty()) {
      content.push_back({{"type", "text"}, {"text", r.content}});
    }
    for (const auto& call : r.calls) {
      content.push_back({{"type", "tool_use"},
                         {"id", call.id},
                         {"name", call.name},
                         {"input", parse_object(call.arguments)}});
    }
    return {{"id", ctx_.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", ctx_.model},
            {"content", content},
            {"stop_reason", stop_reason(r)},
            {"stop_sequence", r.stop_sequence.empty() ? json(nullptr) : json(r.stop_sequence)},
            {"usage",
             {{"input_tokens", usage.prompt_tokens - usage.cached_tokens},
              {"output_tokens", usage.completion_tokens},
              {"cache_read_input_tokens", usage.cached_tokens},
              {"cache_creation_input_tokens", 0}}}};
  }

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };

  std::string open_block(Block kind, json block) {
    open_ = kind;
    return sse_event(
        "content_block_start",
        {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  std::string block_delta(json delta) {
    return sse_event("content_block_delta",
                     {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
  }
  std::string close_block() {
    if (open_ == Block::kNone) return "";
    std::string out;
    if (open_ == Block::kThinking) {
      out += block_delta({{"type", "signature_delta"}, {"signature", ""}});
    }
    out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_ = Block::kNone;
    ++index_;
    return out;
  }

  FormatContext ctx_;
  Block open_ = Block::kNone;
  int index_ = 0;
};

}  // namespace

std::unique_ptr<ApiFormatter> make_anthropic_formatter(const GenerationRequest&, FormatContext c) {
  return std::make_unique<AnthropicFormatter>(std::move(c));
}

}  // namespace hearth::server
