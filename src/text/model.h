// The tokenizer model ("model" in tokenizer.json): turns one pre-tokenized word into ids,
// and maps ids back to token strings for decoding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::text {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word` (valid UTF-8; raw bytes in byte mode) to `out`.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The token string of `id`, or nullptr when the model has no such id.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  // One past the largest id.
  virtual int32_t vocab_size() const = 0;
  // How many tokens the vocabulary holds (HF's get_vocab_size; less than vocab_size() when
  // ids have holes). Added tokens missing from the vocabulary are numbered from here.
  virtual int32_t token_count() const = 0;
};

}  // namespace hearth::text
