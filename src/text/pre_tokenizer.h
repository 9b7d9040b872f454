// Pre-tokenizers from tokenizer.json ("pre_tokenizer"): cut normalized text into the words
// the model encodes one by one. Each matches the HF tokenizers component of the same name.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <vector>

#include "base/status.h"
#include "text/split.h"

namespace hearth::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their sub-pieces (never empty ones).
  virtual Status pre_tokenize(std::vector<Piece>& pieces) const = 0;

  // When the final step maps bytes to GPT-2 byte-level characters, a byte-level BPE model
  // can work on raw bytes instead: this turns the mapping off and returns true. Only the
  // last step of the pipeline may do this.
  virtual bool defer_byte_mapping() { return false; }
};

// Builds the pre-tokenizer described by `config`. An unknown type is an error naming it.
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config);

}  // namespace hearth::text
