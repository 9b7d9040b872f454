// Decoders (tokenizer.json "decoder"): turn the token strings of a decode back into text.
// Each works on the whole token list, as the reference's decode_chain does.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites `tokens` (each may become several, or be joined into one).
  virtual Status decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder described by `config`. An unknown type is an error naming it.
Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config);

}  // namespace hearth::text
