// A compiled Unicode regular expression (PCRE2, UTF + UCP, JIT-compiled) for the split
// patterns in tokenizer.json. Immutable after compile; safe to share across threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace hearth::text {

struct RegexMatch {
  size_t start;
  size_t end;
};

class Regex {
 public:
  // Compiles `pattern` (HF tokenizers' Oniguruma dialect, which PCRE2 reads the same way
  // for the constructs tokenizers use).
  static Result<Regex> compile(std::string_view pattern);

  // Appends every non-overlapping match in `text` (valid UTF-8), left to right, to `out`.
  // An empty match advances the search by one character.
  Status find_all(std::string_view text, std::vector<RegexMatch>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

}  // namespace hearth::text
