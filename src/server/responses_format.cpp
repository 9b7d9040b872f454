// OpenAI Responses wire format: response.created / in_progress, then per output item
// (reasoning, message, function_call) its added / delta / done events, then
// response.completed (or response.incomplete when max_output_tokens cut it short).
#include "server/api_format.h"

namespace hearth::server {
namespace {

using nlohmann::json;

class ResponsesFormatter : public ApiFormatter {
 public:
  explicit ResponsesFormatter(FormatContext c) : ctx_(std::move(c)) {}

  ApiFlavor flavor() const override { return ApiFlavor::kOpenAI; }

  std::string stream_begin(int) override {
    json r = response_object("in_progress", json::array(), nullptr, nullptr);
    return event("response.created", {{"response", r}}) +
           event("response.in_progress", {{"response", r}});
  }

  std::string stream_delta(int, const OutputDelta& d, std::vector<LogprobEntry>) override {
    std::string out;
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        if (open_ != Item::kReasoning) {
          out += open_item(
              Item::kReasoning, "rs_",
              {{"type", "reasoning"}, {"summary", json::array()}, {"content", json::array()}});
        }
        text_ += d.text;
        out += event("response.reasoning_text.delta", {{"item_id", item_id_},
                                                       {"output_index", output_index_},
                                                       {"content_index", 0},
                                                       {"delta", d.text}});
        break;
      case OutputDelta::Kind::kContent:
        if (open_ != Item::kMessage) {
          out += open_item(Item::kMessage, "msg_",
                           {{"type", "message"},
                            {"status", "in_progress"},
                            {"role", "assistant"},
                            {"content", json::array()}});
          out += event("response.content_part.added", {{"item_id", item_id_},
                                                       {"output_index", output_index_},
                                                       {"content_index", 0},
                                                       {"part", text_part("")}});
        }
        text_ += d.text;
        out += event("response.output_text.delta", {{"item_id", item_id_},
                                                    {"output_index", output_index_},
                                                    {"content_index", 0},
                                                    {"delta", d.text},
                                                    {"logprobs", json::array()}});
        break;
      case OutputDelta::Kind::kToolCall: {
        out += close_item();
        std::string id = random_id("fc_");
        json item = {{"id", id},
                     {"type", "function_call"},
                     {"status", "in_progress"},
                     {"call_id", d.call.id},
                     {"name", d.call.name},
                     {"arguments", ""}};
        out +=
            event("response.output_item.added", {{"output_index", output_index_}, {"item", item}});
        out +=
            event("response.function_call_arguments.delta",
                  {{"item_id", id}, {"output_index", output_index_}, {"delta", d.call.arguments}});
        out += event("response.function_call_arguments.done", {{"item_id", id},
                                                               {"output_index", output_index_},
                                                               {"name", d.call.name},
                                                               {"arguments", d.call.arguments}});
        item["status"] = "completed";
        item["arguments"] = d.call.arguments;
        out +=
            event("response.output_item.done", {{"output_index", output_index_}, {"item", item}});
        output_.push_back(item);
        ++output_index_;
        break;
      }
    }
    return out;
  }

  std::string stream_finish(int, const ChoiceResult&, std::vector<LogprobEntry>) override {
    return close_item();
  }

  std::string stream_end(const std::vector<ChoiceResult>& results,
                         const UsageInfo& usage) override {
    const ChoiceResult& r = results.at(0);
    bool incomplete = r.finish == "length";
    json resp =
        response_object(incomplete ? "incomplete" : "completed", output_, usage_json(usage, r),
                        incomplete ? json{{"reason", "max_output_tokens"}} : json(nullptr));
    return event(incomplete ? "response.incomplete" : "response.completed", {{"response", resp}});
  }

  std::string stream_error(const ApiError& e) override {
    return event("error", {{"code", e.code.empty() ? json(nullptr) : json(e.code)},
                           {"message", e.message},
                           {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
  }

  json complete(const std::vector<ChoiceResult>& results, const UsageInfo& usage) override {
    const ChoiceResult& r = results.at(0);
    json output = json::array();
    if (!r.reasoning.empty()) {
      output.push_back(
          {{"id", random_id("rs_")},
           {"type", "reasoning"},
           {"summary", json::array()},
           {"content", json::array({{{"type", "reasoning_text"}, {"text", r.reasoning}}})}});
    }
    if (!r.content.empty() || r.calls.empty()) {
      output.push_back({{"id", random_id("msg_")},
                        {"type", "message"},
                        {"status", "completed"},
                        {"role", "assistant"},
                        {"content", json::array({text_part(r.content)})}});
    }
    for (const auto& call : r.calls) {
      output.push_back({{"id", random_id("fc_")},
                        {"type", "function_call"},
                        {"status", "completed"},
                        {"call_id", call.id},
                        {"name", call.name},
                        {"arguments", call.arguments}});
    }
    bool incomplete = r.finish == "length";
    return response_object(incomplete ? "incomplete" : "completed", output, usage_json(usage, r),
                           incomplete ? json{{"reason", "max_output_tokens"}} : json(nullptr));
  }

 private:
  enum class Item { kNone, kReasoning, kMessage };

  static json text_part(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
  }

  static json usage_json(const UsageInfo& u, const ChoiceResult&) {
    return {{"input_tokens", u.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
            {"output_tokens", u.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  }

  json response_object(const char* status, json output, json usage, json incomplete) const {
    return {{"id", ctx_.id},
            {"object", "response"},
            {"created_at", ctx_.created},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", std::move(incomplete)},
            {"model", ctx_.model},
            {"output", std::move(output)},
            {"parallel_tool_calls", true},
            {"tools", json::array()},
            {"usage", std::move(usage)}};
  }

  std::string event(const char* type, json payload) {
    payload["type"] = type;
    payload["sequence_number"] = sequence_++;
    return sse_event(type, payload);
  }

  // Closes the open item and opens a `kind` one: `item` gets a fresh id with `id_prefix` and is
  // announced with response.output_item.added.
  std::string open_item(Item kind, const char* id_prefix, json item) {
    std::string out = close_item();
    open_ = kind;
    item_id_ = random_id(id_prefix);
    text_.clear();
    item["id"] = item_id_;
    return out + event("response.output_item.added",
                       {{"output_index", output_index_}, {"item", std::move(item)}});
  }

  std::string close_item() {
    std::string out;
    if (open_ == Item::kReasoning) {
      out += event("response.reasoning_text.done", {{"item_id", item_id_},
                                                    {"output_index", output_index_},
                                                    {"content_index", 0},
                                                    {"text", text_}});
      json item = {{"id", item_id_},
                   {"type", "reasoning"},
                   {"summary", json::array()},
                   {"content", json::array({{{"type", "reasoning_text"}, {"text", text_}}})}};
      out += event("response.output_item.done", {{"output_index", output_index_}, {"item", item}});
      output_.push_back(item);
    } else if (open_ == Item::kMessage) {
      out += event("response.output_text.done", {{"item_id", item_id_},
                                                 {"output_index", output_index_},
                                                 {"content_index", 0},
                                                 {"text", text_},
                                                 {"logprobs", json::array()}});
      out += event("response.content_part.done", {{"item_id", item_id_},
                                                  {"output_index", output_index_},
                                                  {"content_index", 0},
                                                  {"part", text_part(text_)}});
      json item = {{"id", item_id_},
                   {"type", "message"},
                   {"status", "completed"},
                   {"role", "assistant"},
                   {"content", json::array({text_part(text_)})}};
      out += event("response.output_item.done", {{"output_index", output_index_}, {"item", item}});
      output_.push_back(item);
    } else {
      return out;
    }
    open_ = Item::kNone;
    ++output_index_;
    return out;
  }

  FormatContext ctx_;
  Item open_ = Item::kNone;
  std::string item_id_;
  std::string text_;
  int output_index_ = 0;
  int sequence_ = 0;
  json output_ = json::array();
};

}  // namespace

std::unique_ptr<ApiFormatter> make_responses_formatter(const GenerationRequest&, FormatContext c) {
  return std::make_unique<ResponsesFormatter>(std::move(c));
}

}  // namespace hearth::server
