// ModelBackend over the real pieces: a loaded Model behind an engine::Engine, the model's
// Tokenizer and ChatTemplate. Generated ids are detokenized incrementally on the engine
// thread (never half a UTF-8 sequence), keeping tool-call and think markers that a
// skip-special-tokens decode would drop.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "engine/engine.h"
#include "server/model_backend.h"
#include "text/chat_template.h"
#include "text/streaming_decoder.h"
#include "text/tokenizer.h"

namespace hearth::server {

class EngineBackend : public ModelBackend {
 public:
  // `chat_template` may be empty (a base model): chat routes then answer 400.
  EngineBackend(std::string id, std::unique_ptr<engine::Engine> engine, text::Tokenizer tokenizer,
                std::optional<text::ChatTemplate> chat_template);
  ~EngineBackend() override;

  const std::string& id() const override { return id_; }
  int64_t created() const override { return created_; }
  int context_length() const override { return context_; }
  int32_t vocab_size() const override { return tokenizer_.vocab_size(); }
  text::ToolCallFormat tool_call_format() const override { return tool_format_; }
  bool has_chat_template() const override { return chat_template_.has_value(); }

  Result<std::string> render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                  bool add_generation_prompt,
                                  const nlohmann::json& kwargs) const override;
  Result<std::vector<int32_t>> tokenize(std::string_view text,
                                        bool add_special_tokens) const override;
  Result<std::string> detokenize(std::span<const int32_t> ids,
                                 bool skip_special_tokens) const override;
  Result<uint64_t> submit(std::vector<int32_t> prompt, const engine::SamplingParams& params,
                          std::shared_ptr<GenerationSink> sink) override;
  void cancel(uint64_t request_id) override;
  nlohmann::json stats() const override;

  // Finishes in-flight requests as cancelled and joins the engine thread.
  void shutdown();

  const text::Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  std::string id_;
  int64_t created_;
  std::unique_ptr<engine::Engine> engine_;
  text::Tokenizer tokenizer_;
  std::optional<text::ChatTemplate> chat_template_;
  text::ToolCallFormat tool_format_;
  int context_;
  std::unordered_set<int32_t> kept_markers_;  // special ids whose text is kept in output
  std::vector<int32_t> eos_ids_;
};

// text::StreamingDecoder (skip_special_tokens) that still emits the text of kept marker
// ids (tool-call / think tags that are special tokens in some vocabularies).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const text::Tokenizer& tokenizer,
                         const std::unordered_set<int32_t>& kept_markers)
      : tokenizer_(tokenizer), kept_(kept_markers), decoder_(tokenizer, true) {}
  std::string push(int32_t id);
  std::string flush() { return decoder_.flush(); }

 private:
  const text::Tokenizer& tokenizer_;
  const std::unordered_set<int32_t>& kept_;
  text::StreamingDecoder decoder_;
};

}  // namespace hearth::server
