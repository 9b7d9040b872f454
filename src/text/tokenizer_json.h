// Fast reading of tokenizer.json: a SAX pass that builds a DOM for the small parts and
// streams the large BPE vocab/merges straight into flat vectors (a DOM of 500k merges costs
// seconds; the flat vectors cost a fraction of that).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace hearth::text {

struct BpeTables {
  std::vector<std::pair<std::string, int64_t>> vocab;       // token -> id, file order
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
};

struct TokenizerJson {
  nlohmann::json root;           // the whole file, minus model.vocab / model.merges when extracted
  std::optional<BpeTables> bpe;  // set when model.vocab is an object (BPE-shaped)
};

Result<TokenizerJson> parse_tokenizer_json(std::string_view text);

// The vocab/merges of a BPE model given as DOM (for configs built in memory).
Result<BpeTables> bpe_tables_from_json(const nlohmann::json& model);

}  // namespace hearth::text
