// Added tokens (tokenizer.json "added_tokens"): strings matched in the input before any
// normalization or splitting, leftmost-longest, with lstrip/rstrip/single_word rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/normalizer.h"
#include "text/string_map.h"

namespace hearth::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// A byte range of the input, either an added token (id >= 0) or text to tokenize (id -1).
struct AddedSplit {
  size_t start;
  size_t end;
  int32_t id;
};

class AddedVocab {
 public:
  // `normalizer` (may be null) gives the matched form of tokens with normalized=true.
  static Result<AddedVocab> build(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Cuts `text` at the tokens of one set: normalized=false tokens match the raw input,
  // normalized=true ones match normalized text. Appends non-empty ranges to `out`.
  void split(std::string_view text, bool normalized_set, std::vector<AddedSplit>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(int32_t id) const;
  std::optional<int32_t> find_content(std::string_view content) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index
    int32_t token = -1;                                       // index into tokens_
  };
  struct Trie {
    std::vector<Node> nodes{Node{}};
    std::vector<int32_t> root_child = std::vector<int32_t>(256, -1);
    void insert(std::string_view key, int32_t token);
    // Index into tokens_ and length of the longest key starting at text[pos], or -1.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  StringIdMap by_content_;                          // content -> index into tokens_
  std::vector<std::pair<int32_t, int32_t>> by_id_;  // (id, index) sorted by id
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace hearth::text
