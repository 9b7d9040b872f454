// BPE: vocabulary and merge-rank table from tokenizer.json, word -> initial symbols
// (vocabulary characters, byte fallback, unk), then merges by rank.
#include "text/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace hearth::text {
namespace {

uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Both ids must reach the low bits the table indexes with (a murmur3 finalizer).
uint64_t merge_hash(uint64_t key) {
  key ^= key >> 33;
  key *= 0xFF51AFD7ED558CCDull;
  key ^= key >> 33;
  key *= 0xC4CEB9FE1A85EC53ull;
  key ^= key >> 33;
  return key;
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::build(const nlohmann::json& config, BpeTables tables,
                                                  bool byte_mode) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  model->byte_mode_ = byte_mode;
  if (auto d = config.find("dropout");
      d != config.end() && d->is_number() && d->get<double>() > 0) {
    return unsupported_error("BPE dropout {} (random encoding) is not supported", d->get<double>());
  }
  model->vocab_.reserve(tables.vocab.size());
  int32_t max_id = -1;
  for (auto& [token, id64] : tables.vocab) {
    if (id64 < 0 || id64 > INT32_MAX / 2) return parse_error("vocab id {} out of range", id64);
    auto id = static_cast<int32_t>(id64);
    model->vocab_[std::move(token)] = id;
    max_id = std::max(max_id, id);
  }
  tables.vocab = {};
  model->id_to_token_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : model->vocab_) model->id_to_token_[id] = &token;

  // Single-character tokens by code point (below U+30000: every script in use).
  model->char_ids_.assign(0x30000, -1);
  for (const auto& [token, id] : model->vocab_) {
    if (token.empty()) continue;
    size_t k = 0;
    uint32_t cp = next_codepoint(token, k);
    if (k == token.size() && cp < model->char_ids_.size()) model->char_ids_[cp] = id;
  }

  if (byte_mode) {
    model->single_byte_.assign(256, -1);
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    std::string ch;
    for (int b = 0; b < 256; ++b) {
      ch.clear();
      append_utf8(ch, alphabet.byte_to_char[b]);
      auto it = model->vocab_.find(ch);
      if (it != model->vocab_.end()) model->single_byte_[b] = it->second;
    }
  }

  model->byte_fallback_ = config.value("byte_fallback", false);
  model->fuse_unk_ = config.value("fuse_unk", false);
  model->ignore_merges_ = config.value("ignore_merges", false);
  auto string_field = [&](const char* name) {
    auto it = config.find(name);
    return it != config.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  model->continuing_subword_prefix_ = string_field("continuing_subword_prefix");
  model->end_of_word_suffix_ = string_field("end_of_word_suffix");
  if (!byte_mode && model->continuing_subword_prefix_.empty() &&
      model->end_of_word_suffix_.empty()) {
    constexpr uint32_t kMetaspace = 0x2581;
    model->glued_to_metaspace_.assign(0x30000, false);
    bool any = false;
    for (const auto& [token, id] : model->vocab_) {
      uint32_t prev_cp = 0;
      size_t k = 0;
      bool first = true;
      while (k < token.size()) {
        uint32_t cp = next_codepoint(token, k);
        if (cp == kMetaspace) {
          any = true;
          if (!first && prev_cp < model->glued_to_metaspace_.size()) {
            model->glued_to_metaspace_[prev_cp] = true;
          }
        }
        prev_cp = cp;
        first = false;
      }
    }
    model->split_before_metaspace_ = any;
  }

  if (byte_mode &&
      (!model->continuing_subword_prefix_.empty() || !model->end_of_word_suffix_.empty())) {
    return internal_error("byte mode BPE with subword prefix/suffix");
  }
  if (std::string unk = string_field("unk_token"); !unk.empty()) {
    auto it = model->vocab_.find(unk);
    if (it != model->vocab_.end()) model->unk_id_ = it->second;
  }
  if (model->byte_fallback_) {
    model->byte_fallback_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      auto it = model->vocab_.find(fmt::format("<0x{:02X}>", b));
      if (it != model->vocab_.end()) model->byte_fallback_ids_[b] = it->second;
    }
  }

  const size_t n_merges = tables.merges.size();
  size_t capacity = 16;
  while (capacity < n_merges * 2) capacity <<= 1;
  model->merges_.assign(capacity, MergeEntry{kEmptyKey, 0, 0});
  model->merge_mask_ = capacity - 1;
  size_t prefix_len = model->continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < n_merges; ++rank) {
    const auto& pair = tables.merges[rank];
    auto a = model->vocab_.find(pair.first);
    auto b = model->vocab_.find(pair.second);
    if (a == model->vocab_.end() || b == model->vocab_.end()) {
      return parse_error("merge '{} {}' uses a token missing from the vocab", pair.first,
                         pair.second);
    }
    std::string merged = pair.first;
    merged.append(pair.second, std::min(prefix_len, pair.second.size()));
    auto m = model->vocab_.find(merged);
    if (m == model->vocab_.end()) {
      return parse_error("merge '{} {}' makes '{}', missing from the vocab", pair.first,
                         pair.second, merged);
    }
    model->add_merge(a->second, b->second, static_cast<int32_t>(rank), m->second);
  }
  return model;
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t rank, int32_t new_id) {
  uint64_t key = merge_key(left, right);
  for (uint64_t slot = merge_hash(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    MergeEntry& e = merges_[slot];
    if (e.key == kEmptyKey || e.key == key) {  // a repeated merge keeps the later rank
      e = MergeEntry{key, rank, new_id};
      return;
    }
  }
}

const BpeModel::MergeEntry* BpeModel::find_merge(int32_t left, int32_t right) const {
  uint64_t key = merge_key(left, right);
  for (uint64_t slot = merge_hash(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeEntry& e = merges_[slot];
    if (e.key == key) return &e;
    if (e.key == kEmptyKey) return nullptr;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  return id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  // A run of unknown characters becomes one unk (fuse_unk) or one unk each.
  bool pending_unk = false;
  auto flush_unk = [&] {
    if (pending_unk) ids.push_back(*unk_id_);
    pending_unk = false;
  };
  auto on_unknown = [&](std::string_view ch) {
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) ids.push_back(byte_fallback_ids_[static_cast<unsigned char>(c)]);
        return;
      }
    }
    if (!unk_id_) return;  // no unk token: the character is dropped, as the reference does
    if (pending_unk && !fuse_unk_) ids.push_back(*unk_id_);
    pending_unk = true;
  };

  if (byte_mode_) {
    for (char c : word) {
      int32_t id = single_byte_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        flush_unk();
        ids.push_back(id);
      } else {
        on_unknown(std::string_view(&c, 1));
      }
    }
    flush_unk();
    return;
  }
  std::string buf;
  size_t i = 0;
  while (i < word.size()) {
    size_t at = i;
    i += utf8_length_of_lead(static_cast<unsigned char>(word[i]));
    std::string_view ch = word.substr(at, i - at);
    std::string_view key = ch;
    if ((!continuing_subword_prefix_.empty() && at > 0) ||
        (!end_of_word_suffix_.empty() && i == word.size())) {
      buf.clear();
      if (at > 0) buf += continuing_subword_prefix_;
      buf += ch;
      if (i == word.size()) buf += end_of_word_suffix_;
      key = buf;
    }
    int32_t id = -1;
    if (key.data() == ch.data() && !char_ids_.empty()) {  // one plain character: the table
      size_t k = 0;
      uint32_t cp = next_codepoint(ch, k);
      if (cp < char_ids_.size()) id = char_ids_[cp];
    } else if (auto it = vocab_.find(key); it != vocab_.end()) {
      id = it->second;
    }
    if (id >= 0) {
      flush_unk();
      ids.push_back(id);
    } else {
      on_unknown(ch);
    }
  }
  flush_unk();
}

void BpeModel::apply_merges(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  constexpr size_t kSmall = 64;
  if (n <= kSmall) {
    // Short words: keep each adjacent pair's rank; merge the lowest, leftmost first.
    int32_t rank[kSmall];
    int32_t target[kSmall];
    size_t size = n;
    auto fill = [&](size_t i) {
      const MergeEntry* e = find_merge(ids[i], ids[i + 1]);
      rank[i] = e ? e->rank : INT32_MAX;
      target[i] = e ? e->new_id : -1;
    };
    for (size_t i = 0; i + 1 < size; ++i) fill(i);
    for (;;) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < size; ++i) {
        if (rank[i] < rank[best]) best = i;
      }
      if (rank[best] == INT32_MAX) break;
      ids[best] = target[best];
      for (size_t i = best + 1; i + 1 < size; ++i) ids[i] = ids[i + 1];
      for (size_t i = best + 1; i + 2 < size; ++i) {
        rank[i] = rank[i + 1];
        target[i] = target[i + 1];
      }
      --size;
      if (best + 1 < size) fill(best);
      if (best > 0) fill(best - 1);
      if (size < 2) break;
    }
    ids.resize(size);
    return;
  }
  // Long words (SentencePiece-style text without pre-tokenization): a linked list of
  // symbols and a min-heap of candidate merges keyed rank << 32 | position (lowest rank,
  // then leftmost), stale entries skipped when popped.
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::vector<uint64_t> heap;
  heap.reserve(n);
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const MergeEntry* e = find_merge(ids[pos], ids[next[pos]])) {
      heap.push_back((static_cast<uint64_t>(e->rank) << 32) | static_cast<uint32_t>(pos));
      std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) {
    if (const MergeEntry* e = find_merge(ids[i], ids[i + 1])) {
      heap.push_back((static_cast<uint64_t>(e->rank) << 32) | static_cast<uint32_t>(i));
    }
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
    uint64_t top = heap.back();
    heap.pop_back();
    auto rank = static_cast<int32_t>(top >> 32);
    auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    if (!alive[pos] || next[pos] < 0) continue;
    int32_t right = next[pos];
    const MergeEntry* e = find_merge(ids[pos], ids[right]);
    // The pair changed since it was queued (a rank names exactly one pair).
    if (e == nullptr || e->rank != rank) continue;
    ids[pos] = e->new_id;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = pos;
    push(prev[pos]);
    push(pos);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) ids[out++] = ids[i];
  }
  ids.resize(out);
}

void BpeModel::tokenize_word(std::string_view word, std::vector<int32_t>& out) const {
  // The cache comes first: it only ever holds what the steps below would give.
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  if (ignore_merges_) {  // a word that is itself a token skips the merges
    std::string mapped;
    std::string_view key = word;
    if (byte_mode_) {
      mapped = byte_level_encode(word);
      key = mapped;
    }
    auto it = vocab_.find(key);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  initial_symbols(word, ids);
  apply_merges(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace hearth::text

namespace hearth::text {

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (!split_before_metaspace_ || word.size() <= kMaxCachedWordBytes || ignore_merges_) {
    tokenize_word(word, out);
    return;
  }
  size_t start = 0, i = 0;
  uint32_t prev_cp = 0;
  while (i < word.size()) {
    size_t at = i;
    uint32_t cp = next_codepoint(word, i);
    if (cp == 0x2581 && at > start && prev_cp < glued_to_metaspace_.size() &&
        !glued_to_metaspace_[prev_cp] && char_ids_[prev_cp] >= 0) {
      tokenize_word(word.substr(start, at - start), out);
      start = at;
    }
    prev_cp = cp;
  }
  tokenize_word(word.substr(start), out);
}

}  // namespace hearth::text
