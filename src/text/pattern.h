// The "pattern" field shared by Split, Replace (normalizer and decoder): a literal string
// or a regex. Finds non-overlapping matches and replaces them.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/regex.h"

namespace hearth::text {

class Pattern {
 public:
  // {"String": "..."} or {"Regex": "..."}.
  static Result<Pattern> from_json(const nlohmann::json& config);
  static Pattern literal(std::string text);
  static Result<Pattern> regex(std::string_view pattern);

  // Appends the non-overlapping matches in `text`, left to right.
  Status find_all(std::string_view text, std::vector<RegexMatch>& out) const;

  // Every match replaced by `content`.
  Result<std::string> replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

}  // namespace hearth::text
