// Byte-pair-encoding model: byte-level (GPT-2 / Llama 3 / Qwen) and SentencePiece-style
// (byte_fallback, unk fusing). Merges are applied lowest rank first, leftmost on ties, the
// order HF tokenizers uses; repeated words are served from a bounded cache.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "text/model.h"
#include "text/string_map.h"
#include "text/tokenizer_json.h"

namespace hearth::text {

class BpeModel final : public Model {
 public:
  // `byte_mode`: words arrive as raw bytes and the vocabulary is keyed by the bytes its
  // byte-level characters stand for (the pre-tokenizer skipped the byte mapping).
  // `config`: the model object (options); `tables`: its vocab and merges.
  static Result<std::unique_ptr<BpeModel>> build(const nlohmann::json& config, BpeTables tables,
                                                 bool byte_mode);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token_.size()); }
  int32_t token_count() const override { return static_cast<int32_t>(vocab_.size()); }

 private:
  struct MergeEntry {
    uint64_t key;  // left id << 32 | right id; kEmptyKey when unused
    int32_t rank;
    int32_t new_id;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  void add_merge(int32_t left, int32_t right, int32_t rank, int32_t new_id);
  const MergeEntry* find_merge(int32_t left, int32_t right) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void apply_merges(std::vector<int32_t>& ids) const;
  void tokenize_word(std::string_view word, std::vector<int32_t>& out) const;

  StringIdMap vocab_;                            // token string -> id (the file's strings)
  std::vector<const std::string*> id_to_token_;  // [vocab_size] keys of vocab_; null for holes
  std::vector<MergeEntry> merges_;               // open addressing, power-of-two size
  uint64_t merge_mask_ = 0;
  // SentencePiece-style long words are cut before each U+2581 whose preceding character X
  // never precedes U+2581 inside a token ("X▁" in no token): no merge can cross such a cut,
  // so the pieces encode independently (and hit the cache) with the same result.
  bool split_before_metaspace_ = false;
  std::vector<bool> glued_to_metaspace_;    // [0x30000] X appears before U+2581 in some token
  std::vector<int32_t> char_ids_;           // [0x30000] id of each one-character token, or -1
  std::vector<int32_t> single_byte_;        // byte mode: [256] id of each byte, or -1
  std::vector<int32_t> byte_fallback_ids_;  // [256] id of "<0xXX>", or -1

  bool byte_mode_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;

  // Word -> ids for short words seen before; encode is const and may run on many threads.
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedWordBytes = 64;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace hearth::text
