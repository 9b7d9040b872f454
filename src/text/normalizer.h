// Normalizers from tokenizer.json ("normalizer"): rewrite text before it is split into
// words. Each matches the HF tokenizers component of the same name.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>

#include "base/status.h"

namespace hearth::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place.
  virtual Status normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `config` (a JSON object with "type"). An unknown or
// unsupported type is an error naming it.
Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config);

}  // namespace hearth::text
