// OpenAI wire formats: chat.completion(.chunk) and text_completion, incl. logprobs, tool
// call deltas, reasoning_content, usage chunks and the closing "data: [DONE]".
#include <map>

#include "server/api_format.h"

namespace hearth::server {

using nlohmann::json;

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_data(const json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

std::string sse_event(std::string_view event, const json& payload) {
  return "event: " + std::string(event) + "\ndata: " + dump_json(payload) + "\n\n";
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json chat_logprob_entry(const LogprobEntry& e) {
  json top = json::array();
  for (const auto& [tok, lp] : e.top) {
    top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
  }
  return {{"token", e.token},
          {"logprob", e.logprob},
          {"bytes", bytes_of(e.token)},
          {"top_logprobs", top}};
}

json usage_json(const UsageInfo& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// The fields every OpenAI response object and chunk starts with.
json openai_object(const FormatContext& ctx, const char* object) {
  return {{"id", ctx.id},
          {"object", object},
          {"created", ctx.created},
          {"model", ctx.model},
          {"system_fingerprint", nullptr}};
}

// The end of an OpenAI stream: when the client asked for usage (stream_options.include_usage),
// `chunk` (a bare chunk object) carries it with no choices; then "data: [DONE]".
std::string openai_stream_end(bool include_usage, json chunk, const UsageInfo& usage) {
  std::string out;
  if (include_usage) {
    chunk["choices"] = json::array();
    chunk["usage"] = usage_json(usage);
    out += sse_data(chunk);
  }
  return out + "data: [DONE]\n\n";
}

// A mid-stream error: the error body as one data event, then "data: [DONE]".
std::string openai_stream_error(const ApiError& e) {
  return sse_data(json::parse(render_error(e, ApiFlavor::kOpenAI).body)) + "data: [DONE]\n\n";
}

class ChatFormatter : public ApiFormatter {
 public:
  ChatFormatter(const GenerationRequest& r, FormatContext c)
      : ctx_(std::move(c)), n_(r.n), logprobs_(r.logprobs), include_usage_(r.include_usage) {}

  ApiFlavor flavor() const override { return ApiFlavor::kOpenAI; }

  std::string stream_begin(int) override {
    std::string out;
    for (int i = 0; i < n_; ++i) {
      out += chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr, json(nullptr));
    }
    return out;
  }

  std::string stream_delta(int choice, const OutputDelta& d,
                           std::vector<LogprobEntry> lps) override {
    json delta;
    switch (d.kind) {
      case OutputDelta::Kind::kContent:
        delta = {{"content", d.text}};
        break;
      case OutputDelta::Kind::kReasoning:
        delta = {{"reasoning_content", d.text}};
        break;
      case OutputDelta::Kind::kToolCall:
        delta = {{"tool_calls",
                  json::array(
                      {{{"index", d.tool_index},
                        {"id", d.call.id},
                        {"type", "function"},
                        {"function", {{"name", d.call.name}, {"arguments", d.call.arguments}}}}})}};
        break;
    }
    return chunk(choice, delta, logprobs_json(lps), json(nullptr));
  }

  std::string stream_finish(int choice, const ChoiceResult& r,
                            std::vector<LogprobEntry> lps) override {
    return chunk(choice, json::object(), logprobs_json(lps), r.finish);
  }

  std::string stream_end(const std::vector<ChoiceResult>&, const UsageInfo& usage) override {
    return openai_stream_end(include_usage_, base("chat.completion.chunk"), usage);
  }

  std::string stream_error(const ApiError& e) override { return openai_stream_error(e); }

  json complete(const std::vector<ChoiceResult>& results, const UsageInfo& usage) override {
    json c = base("chat.completion");
    json choices = json::array();
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      json message = {{"role", "assistant"}};
      message["content"] = r.content.empty() && !r.calls.empty() ? json(nullptr) : json(r.content);
      if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
      if (!r.calls.empty()) {
        json calls = json::array();
        for (const auto& call : r.calls) {
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        message["tool_calls"] = calls;
      }
      choices.push_back({{"index", i},
                         {"message", message},
                         {"logprobs", logprobs_json(r.logprobs)},
                         {"finish_reason", r.finish}});
    }
    c["choices"] = choices;
    c["usage"] = usage_json(usage);
    return c;
  }

 private:
  json base(const char* object) const { return openai_object(ctx_, object); }

  json logprobs_json(const std::vector<LogprobEntry>& lps) const {
    if (!logprobs_) return nullptr;
    json content = json::array();
    for (const auto& e : lps) content.push_back(chat_logprob_entry(e));
    return {{"content", content}};
  }

  std::string chunk(int choice, json delta, json logprobs, json finish) const {
    json c = base("chat.completion.chunk");
    c["choices"] = json::array({{{"index", choice},
                                 {"delta", std::move(delta)},
                                 {"logprobs", std::move(logprobs)},
                                 {"finish_reason", std::move(finish)}}});
    if (include_usage_) c["usage"] = nullptr;
    return sse_data(c);
  }

  FormatContext ctx_;
  int n_;
  bool logprobs_;
  bool include_usage_;
};

class CompletionFormatter : public ApiFormatter {
 public:
  CompletionFormatter(const GenerationRequest& r, FormatContext c)
      : ctx_(std::move(c)),
        n_(r.n),
        logprobs_(r.logprobs),
        include_usage_(r.include_usage),
        offsets_(r.n, static_cast<int>(ctx_.echo.size())) {}

  ApiFlavor flavor() const override { return ApiFlavor::kOpenAI; }

  std::string stream_begin(int) override {
    std::string out;
    if (!ctx_.echo.empty()) {
      for (int i = 0; i < n_; ++i) out += chunk(i, ctx_.echo, nullptr, json(nullptr));
    }
    return out;
  }

  std::string stream_delta(int choice, const OutputDelta& d,
                           std::vector<LogprobEntry> lps) override {
    if (d.kind != OutputDelta::Kind::kContent) return "";
    return chunk(choice, d.text, logprobs_json(choice, lps), json(nullptr));
  }

  std::string stream_finish(int choice, const ChoiceResult& r,
                            std::vector<LogprobEntry> lps) override {
    return chunk(choice, "", logprobs_json(choice, lps), r.finish);
  }

  std::string stream_end(const std::vector<ChoiceResult>&, const UsageInfo& usage) override {
    return openai_stream_end(include_usage_, base(), usage);
  }

  std::string stream_error(const ApiError& e) override { return openai_stream_error(e); }

  json complete(const std::vector<ChoiceResult>& results, const UsageInfo& usage) override {
    json c = base();
    json choices = json::array();
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      choices.push_back({{"index", i},
                         {"text", ctx_.echo + r.content},
                         {"logprobs", logprobs_json(static_cast<int>(i), r.logprobs)},
                         {"finish_reason", r.finish}});
    }
    c["choices"] = choices;
    c["usage"] = usage_json(usage);
    return c;
  }

 private:
  json base() const { return openai_object(ctx_, "text_completion"); }

  json logprobs_json(int choice, const std::vector<LogprobEntry>& lps) {
    if (!logprobs_) return nullptr;
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
         offsets = json::array();
    for (const auto& e : lps) {
      tokens.push_back(e.token);
      token_logprobs.push_back(e.logprob);
      json alts = json::object();
      for (const auto& [tok, lp] : e.top) alts[tok] = lp;
      top.push_back(alts);
      offsets.push_back(offsets_[choice]);
      offsets_[choice] += static_cast<int>(e.token.size());
    }
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top},
            {"text_offset", offsets}};
  }

  std::string chunk(int choice, const std::string& text, json logprobs, json finish) const {
    json c = base();
    c["choices"] = json::array({{{"index", choice},
                                 {"text", text},
                                 {"logprobs", std::move(logprobs)},
                                 {"finish_reason", std::move(finish)}}});
    if (include_usage_) c["usage"] = nullptr;
    return sse_data(c);
  }

  FormatContext ctx_;
  int n_;
  bool logprobs_;
  bool include_usage_;
  std::vector<int> offsets_;
};

}  // namespace

std::unique_ptr<ApiFormatter> make_anthropic_formatter(const GenerationRequest& r, FormatContext c);
std::unique_ptr<ApiFormatter> make_responses_formatter(const GenerationRequest& r, FormatContext c);

std::unique_ptr<ApiFormatter> make_formatter(const GenerationRequest& request,
                                             FormatContext context) {
  switch (request.api) {
    case ApiKind::kChatCompletions:
      return std::make_unique<ChatFormatter>(request, std::move(context));
    case ApiKind::kCompletions:
      return std::make_unique<CompletionFormatter>(request, std::move(context));
    case ApiKind::kMessages:
      return make_anthropic_formatter(request, std::move(context));
    case ApiKind::kResponses:
      return make_responses_formatter(request, std::move(context));
  }
  return nullptr;
}

}  // namespace hearth::server
