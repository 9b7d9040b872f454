// Unigram Viterbi: best path over byte positions, candidates from a byte trie.
#include "text/unigram.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace hearth::text {

Result<std::unique_ptr<UnigramModel>> UnigramModel::from_json(const nlohmann::json& config) {
  auto model = std::unique_ptr<UnigramModel>(new UnigramModel());
  auto vocab = config.find("vocab");
  if (vocab == config.end() || !vocab->is_array())
    return parse_error("Unigram model without vocab");
  double min_score = 0;
  for (const auto& entry : *vocab) {
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
      return parse_error("Unigram vocab entry must be [piece, score]: {}", entry.dump());
    }
    auto id = static_cast<int32_t>(model->pieces_.size());
    model->pieces_.push_back(entry[0].get<std::string>());
    double score = entry[1].get<double>();
    model->scores_.push_back(score);
    min_score = std::min(min_score, score);
    model->ids_.emplace(model->pieces_.back(), id);
    const std::string& piece = model->pieces_.back();
    int32_t node = 0;
    for (char ch : piece) {
      auto b = static_cast<unsigned char>(ch);
      int32_t child = -1;
      for (const auto& [byte, index] : model->trie_[node].children) {
        if (byte == b) child = index;
      }
      if (child < 0) {
        child = static_cast<int32_t>(model->trie_.size());
        model->trie_[node].children.emplace_back(b, child);
        model->trie_.emplace_back();
      }
      node = child;
    }
    if (!piece.empty() && model->trie_[node].id < 0) model->trie_[node].id = id;
  }
  model->unk_score_ = min_score - 10.0;
  if (auto it = config.find("unk_id"); it != config.end() && it->is_number_integer()) {
    auto unk = it->get<int32_t>();
    if (unk < 0 || unk >= model->vocab_size())
      return parse_error("Unigram unk_id {} out of range", unk);
    model->unk_id_ = unk;
  }
  model->byte_fallback_ = config.value("byte_fallback", false);
  return model;
}

std::optional<int32_t> UnigramModel::token_to_id(std::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* UnigramModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return nullptr;
  return &pieces_[id];
}

void UnigramModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const size_t size = word.size();
  struct Best {
    int32_t id = -1;
    double score = 0;
    int64_t starts_at = -1;  // -1: not reached yet
  };
  std::vector<Best> best(size + 1);
  size_t start = 0;
  while (start < size) {
    const double here = best[start].score;
    const size_t char_len = utf8_length_of_lead(static_cast<unsigned char>(word[start]));
    bool has_single = false;
    int32_t node = 0;
    for (size_t i = start; i < size; ++i) {
      auto b = static_cast<unsigned char>(word[i]);
      int32_t next = -1;
      for (const auto& [byte, index] : trie_[node].children) {
        if (byte == b) next = index;
      }
      if (next < 0) break;
      node = next;
      int32_t id = trie_[node].id;
      if (id < 0) continue;
      size_t end = i + 1;
      double candidate = scores_[id] + here;
      if (best[end].starts_at < 0 || candidate > best[end].score) {
        best[end] = {id, candidate, static_cast<int64_t>(start)};
      }
      if (end - start == char_len) has_single = true;
    }
    if (!has_single) {
      Best& target = best[start + char_len];
      double candidate = unk_score_ + here;
      if (target.starts_at < 0 || candidate > target.score) {
        target = {unk_id_.value_or(-1), candidate, static_cast<int64_t>(start)};
      }
    }
    start += char_len;
  }
  // Walk back; runs of unknown pieces fuse into one string.
  std::vector<std::string_view> pieces;
  size_t end = size;
  size_t fused_end = 0;
  bool fusing = false;
  while (end > 0) {
    const Best& node = best[end];
    auto begin = static_cast<size_t>(node.starts_at);
    bool is_unk = unk_id_ && node.id == *unk_id_;
    if (is_unk) {
      if (!fusing) fused_end = end;
      fusing = true;
    } else {
      if (fusing) pieces.push_back(word.substr(end, fused_end - end));
      fusing = false;
      pieces.push_back(word.substr(begin, end - begin));
    }
    end = begin;
  }
  if (fusing) pieces.push_back(word.substr(0, fused_end));
  std::reverse(pieces.begin(), pieces.end());
  for (std::string_view piece : pieces) {
    if (auto it = ids_.find(piece); it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char c : piece) {
        auto it = ids_.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(c)));
        if (it == ids_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == piece.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id_) out.push_back(*unk_id_);
  }
}

}  // namespace hearth::text
