// EngineBackend: bridges engine::RequestSink to GenerationSink with incremental
// detokenization, and the tokenizer / chat template to the routes.
#include "server/engine_backend.h"

#include <chrono>

#include "text/reasoning_parser.h"

namespace hearth::server {
namespace {

class SinkAdapter : public engine::RequestSink {
 public:
  SinkAdapter(std::shared_ptr<GenerationSink> sink, const text::Tokenizer& tokenizer,
              const std::unordered_set<int32_t>& kept)
      : sink_(std::move(sink)), detok_(tokenizer, kept) {}

  void on_tokens(std::span<const int32_t> tokens,
                 std::span<const engine::TokenLogprobs> logprobs) override {
    std::vector<StreamToken> out;
    out.reserve(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      StreamToken t;
      t.id = tokens[i];
      t.text = detok_.push(tokens[i]);
      if (i < logprobs.size()) t.logprobs = logprobs[i];
      out.push_back(std::move(t));
    }
    sink_->on_tokens(std::move(out));
  }

  void on_finish(const engine::FinishInfo& info) override {
    std::string tail = detok_.flush();
    if (!tail.empty()) {
      StreamToken t;
      t.id = -1;
      t.text = std::move(tail);
      // A text-only piece: not a token of its own, so it must not count as one.
      sink_->on_tokens({std::move(t)});
    }
    GenerationOutcome o;
    switch (info.reason) {
      case engine::FinishReason::kStop:
        o.reason = FinishReason::kStop;
        break;
      case engine::FinishReason::kLength:
        o.reason = FinishReason::kLength;
        break;
      case engine::FinishReason::kCancelled:
        o.reason = FinishReason::kCancelled;
        break;
      case engine::FinishReason::kError:
        o.reason = FinishReason::kError;
        break;
    }
    o.prompt_tokens = info.prompt_tokens;
    o.cached_tokens = info.cached_tokens;
    o.completion_tokens = info.completion_tokens;
    o.status = info.status;
    sink_->on_finish(o);
  }

 private:
  std::shared_ptr<GenerationSink> sink_;
  IncrementalDetokenizer detok_;
};

}  // namespace

std::string IncrementalDetokenizer::push(int32_t id) {
  if (kept_.count(id) == 0) return decoder_.push(id);
  std::string out = decoder_.flush();
  out += tokenizer_.id_to_token(id);
  decoder_ = text::StreamingDecoder(tokenizer_, true);
  return out;
}

EngineBackend::EngineBackend(std::string id, std::unique_ptr<engine::Engine> engine,
                             text::Tokenizer tokenizer,
                             std::optional<text::ChatTemplate> chat_template)
    : id_(std::move(id)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      engine_(std::move(engine)),
      tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      tool_format_(chat_template_ ? text::detect_tool_call_format(chat_template_->source(true))
                                  : text::ToolCallFormat::kHermes),
      context_(engine_->scheduler_options().max_context) {
  std::vector<std::string> markers = text::tool_call_markers(tool_format_);
  markers.push_back("<think>");
  markers.push_back("</think>");
  for (const auto& m : markers) {
    auto id = tokenizer_.token_to_id(m);
    if (id && tokenizer_.is_special(*id)) kept_markers_.insert(*id);
  }
  eos_ids_ = tokenizer_.eos_ids();
}

EngineBackend::~EngineBackend() { shutdown(); }

void EngineBackend::shutdown() {
  if (engine_) engine_->shutdown();
}

Result<std::string> EngineBackend::render_chat(const nlohmann::json& messages,
                                               const nlohmann::json& tools,
                                               bool add_generation_prompt,
                                               const nlohmann::json& kwargs) const {
  if (!chat_template_) return invalid_argument_error("the model has no chat template");
  return chat_template_->render(messages, tools, add_generation_prompt, kwargs);
}

Result<std::vector<int32_t>> EngineBackend::tokenize(std::string_view text,
                                                     bool add_special_tokens) const {
  return tokenizer_.encode(text, add_special_tokens);
}

Result<std::string> EngineBackend::detokenize(std::span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  return tokenizer_.decode(ids, skip_special_tokens);
}

Result<uint64_t> EngineBackend::submit(std::vector<int32_t> prompt,
                                       const engine::SamplingParams& params,
                                       std::shared_ptr<GenerationSink> sink) {
  engine::SamplingParams p = params;
  if (!p.ignore_eos) {
    for (int32_t id : eos_ids_) p.stop_token_ids.push_back(id);
  }
  auto adapter = std::make_shared<SinkAdapter>(std::move(sink), tokenizer_, kept_markers_);
  HEARTH_ASSIGN_OR_RETURN(engine::RequestId id, engine_->submit(std::move(prompt), p, adapter));
  return static_cast<uint64_t>(id);
}

void EngineBackend::cancel(uint64_t request_id) { engine_->cancel(request_id); }

nlohmann::json EngineBackend::stats() const {
  engine::EngineStats s = engine_->stats();
  return {{"running", s.running},
          {"waiting", s.waiting},
          {"preemptions", s.preemptions},
          {"blocks_total", s.blocks_total},
          {"blocks_used", s.blocks_used},
          {"blocks_free", s.blocks_free},
          {"blocks_cached", s.blocks_cached},
          {"blocks_idle", s.blocks_idle},
          {"block_size", s.block_size},
          {"prefix_query_tokens", s.prefix_query_tokens},
          {"prefix_hit_tokens", s.prefix_hit_tokens},
          {"prefix_hit_rate", s.prefix_hit_rate},
          {"prompt_tokens_total", s.prompt_tokens_total},
          {"generation_tokens_total", s.generation_tokens_total},
          {"requests_finished", s.requests_finished},
          {"steps", s.steps},
          {"prompt_tokens_per_s", s.prompt_tokens_per_s},
          {"generation_tokens_per_s", s.generation_tokens_per_s}};
}

}  // namespace hearth::server
