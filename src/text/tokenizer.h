// hearth's tokenizer: loads a HuggingFace tokenizer.json and encodes/decodes exactly as
// HF tokenizers (Rust) does. Immutable after load; encode/decode are safe on many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace hearth::text {

class Tokenizer {
 public:
  // `dir_or_tokenizer_json`: a model directory (reads tokenizer.json, plus
  // tokenizer_config.json and generation_config.json for BOS/EOS when present) or the path
  // of a tokenizer.json. An unsupported component is an error naming it.
  static Result<Tokenizer> load(const std::string& dir_or_tokenizer_json);
  // Same from the JSON text of a tokenizer.json (no BOS/EOS configuration).
  static Result<Tokenizer> from_json_text(std::string_view tokenizer_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (must be valid UTF-8; otherwise an invalid-argument error). Added
  // tokens written in the text are always recognized; `add_special_tokens` runs the
  // post-processor (BOS etc.).
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`. Ids with no token (outside [0, vocab_size()) or holes) decode to nothing,
  // as in the reference; `skip_special_tokens` drops special added tokens.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // From tokenizer_config.json's bos_token.
  std::optional<int32_t> bos_id() const;
  // tokenizer_config.json's eos_token, then generation_config.json's eos_token_id(s).
  std::vector<int32_t> eos_ids() const;

  // Added tokens first, then the model vocabulary.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string, or "" for an id with no token.
  std::string id_to_token(int32_t id) const;
  // One past the largest id of the model vocabulary and the added tokens.
  int32_t vocab_size() const;
  // Whether `id` is an added token marked special (what skip_special_tokens drops).
  bool is_special(int32_t id) const;

  struct Impl;  // opaque outside the text layer (tokenizer_impl.h)

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth::text
