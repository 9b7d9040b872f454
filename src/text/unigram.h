// Unigram model (SentencePiece unigram LM, tokenizer.json "Unigram"): the best-scoring
// segmentation of each word by Viterbi over a trie of the vocabulary, unknown characters
// scored min_score - 10, as HF tokenizers does; optional byte fallback.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "text/model.h"
#include "text/string_map.h"

namespace hearth::text {

class UnigramModel final : public Model {
 public:
  static Result<std::unique_ptr<UnigramModel>> from_json(const nlohmann::json& config);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t token_count() const override { return static_cast<int32_t>(pieces_.size()); }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node
    int32_t id = -1;
  };

  std::vector<std::string> pieces_;  // [vocab] by id
  std::vector<double> scores_;       // [vocab]
  StringIdMap ids_;
  std::vector<Node> trie_{Node{}};
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = true;
  double unk_score_ = 0;
};

}  // namespace hearth::text
