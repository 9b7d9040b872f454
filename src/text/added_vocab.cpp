// Trie matching of added tokens with the reference's leftmost-longest, non-overlapping
// scan, then its single_word / lstrip / rstrip adjustments.
#include "text/added_vocab.h"

#include <algorithm>

#include "text/utf8.h"

namespace hearth::text {
namespace {

bool is_word_char(uint32_t cp) {
  return cp == '_' || is_alphanumeric(cp) || is_nonspacing_mark(cp);
}

// The code point ending at byte `end` of valid UTF-8 `s` (end > 0).
uint32_t codepoint_before(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return next_codepoint(s, start);
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view key, int32_t token) {
  if (key.empty()) return;
  auto b0 = static_cast<unsigned char>(key[0]);
  if (root_child[b0] < 0) {
    root_child[b0] = static_cast<int32_t>(nodes.size());
    nodes.emplace_back();
  }
  int32_t node = root_child[b0];
  for (size_t i = 1; i < key.size(); ++i) {
    auto b = static_cast<unsigned char>(key[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes[node].children) {
      if (byte == b) child = index;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(b, child);
      nodes.emplace_back();
    }
    node = child;
  }
  if (nodes[node].token < 0) nodes[node].token = token;
}

std::pair<int32_t, size_t> AddedVocab::Trie::longest_at(std::string_view text, size_t pos) const {
  int32_t node = root_child[static_cast<unsigned char>(text[pos])];
  std::pair<int32_t, size_t> best{-1, 0};
  size_t i = pos + 1;
  while (node >= 0) {
    if (nodes[node].token >= 0) best = {nodes[node].token, i - pos};
    if (i >= text.size()) break;
    auto b = static_cast<unsigned char>(text[i]);
    int32_t next = -1;
    for (const auto& [byte, index] : nodes[node].children) {
      if (byte == b) next = index;
    }
    node = next;
    ++i;
  }
  return best;
}

Result<AddedVocab> AddedVocab::build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  AddedVocab v;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    auto index = static_cast<int32_t>(i);
    v.by_content_.emplace(t.content, index);
    v.by_id_.emplace_back(t.id, index);
    if (!t.normalized) {
      v.raw_trie_.insert(t.content, index);
    } else {
      std::string form = t.content;
      if (normalizer != nullptr) {
        HEARTH_RETURN_IF_ERROR(normalizer->normalize(form).with_context(
            "normalizing added token '" + t.content + "'"));
      }
      v.normalized_trie_.insert(form, index);
    }
  }
  std::stable_sort(v.by_id_.begin(), v.by_id_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return v;
}

const AddedToken* AddedVocab::find_id(int32_t id) const {
  auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::make_pair(id, INT32_MIN));
  if (it == by_id_.end() || it->first != id) return nullptr;
  return &tokens_[it->second];
}

std::optional<int32_t> AddedVocab::find_content(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

void AddedVocab::split(std::string_view text, bool normalized_set,
                       std::vector<AddedSplit>& out) const {
  const Trie& trie = normalized_set ? normalized_trie_ : raw_trie_;
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (trie.root_child[static_cast<unsigned char>(text[pos])] < 0) {
      ++pos;
      continue;
    }
    auto [index, len] = trie.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // the scan resumes after the raw match, whatever happens below
    const AddedToken& t = tokens_[index];
    if (t.single_word) {
      bool start_space = start == 0 || !is_word_char(codepoint_before(text, start));
      size_t k = stop;
      bool stop_space = stop == text.size() || !is_word_char(next_codepoint(text, k));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t k = b;
        if (!is_whitespace(next_codepoint(text, k))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t k = stop;
        if (!is_whitespace(next_codepoint(text, k))) break;
        stop = k;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace hearth::text
