// FakeModel: a Model whose "KV" stores each slot's token id and position, and whose next
// token is a hash of the sequence it reads back through the block table. A block shared by
// mistake, overwritten, or missing shows up as a wrong token or a forward error, so the
// scheduler's paging can be tested without weights or a device.
#pragma once

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "base/hash.h"
#include "models/model.h"

namespace hearth::engine::testing {

// The token the fake model predicts after `tokens`.
inline int32_t fake_next_token(std::span<const int32_t> tokens, int32_t vocab) {
  return static_cast<int32_t>(
      xxh3_64(std::span(reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size_bytes())) %
      static_cast<uint64_t>(vocab));
}

// The greedy continuation of `prompt` for `n` tokens, stopping after an EOS id.
inline std::vector<int32_t> fake_greedy(std::vector<int32_t> tokens, int n, int32_t vocab,
                                        const std::vector<int32_t>& eos = {}) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    int32_t next = fake_next_token(tokens, vocab);
    out.push_back(next);
    tokens.push_back(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
  }
  return out;
}

class FakeModel : public Model {
 public:
  FakeModel(int32_t vocab, int max_context, std::vector<int32_t> eos = {}) {
    config_.vocab_size = vocab;
    config_.max_position_embeddings = max_context;
    config_.generation.eos_token_ids = std::move(eos);
    config_.model_type = "fake";
  }

  const ModelConfig& config() const override { return config_; }
  Status create_kv_cache(int num_blocks, int block_size) override {
    num_blocks_ = num_blocks;
    block_size_ = block_size;
    slots_.assign(static_cast<size_t>(num_blocks) * block_size, Slot{});
    return ok_status();
  }
  int kv_num_blocks() const override { return num_blocks_; }
  int kv_block_size() const override { return block_size_; }
  size_t kv_bytes_per_block(int block_size) const override {
    return static_cast<size_t>(block_size) * sizeof(Slot);
  }
  Status copy_kv_block(int src, int dst) override {
    std::memcpy(&slots_[static_cast<size_t>(dst) * block_size_],
                &slots_[static_cast<size_t>(src) * block_size_], sizeof(Slot) * block_size_);
    return ok_status();
  }

  Status forward(const ForwardBatch& batch, std::span<float> logits) override {
    ++forward_calls;
    max_batch_tokens = std::max(max_batch_tokens, batch.tokens.size());
    if (fail_next) {
      fail_next = false;
      return internal_error("injected forward failure");
    }
    const size_t vocab = static_cast<size_t>(config_.vocab_size);
    if (logits.size() != batch.logit_rows.size() * vocab) {
      return internal_error("logits span has the wrong size");
    }
    // Write every slice's tokens into its slots first (as attention does before reading).
    for (const SequenceSlice& s : batch.sequences) {
      for (int j = 0; j < s.num_tokens; ++j) {
        int pos = s.num_cached + j;
        if (batch.positions[s.first_token + j] != pos) return internal_error("bad position");
        Slot* slot = slot_of(s, pos);
        if (slot == nullptr) return internal_error("slot {} outside the block table", pos);
        *slot = {batch.tokens[s.first_token + j], pos};
      }
    }
    for (size_t r = 0; r < batch.logit_rows.size(); ++r) {
      int32_t row = batch.logit_rows[r];
      const SequenceSlice* owner = nullptr;
      for (const SequenceSlice& s : batch.sequences) {
        if (row >= s.first_token && row < s.first_token + s.num_tokens) owner = &s;
      }
      if (owner == nullptr) return internal_error("logit row {} in no slice", row);
      int last = owner->num_cached + (row - owner->first_token);
      std::vector<int32_t> seen;
      for (int pos = 0; pos <= last; ++pos) {
        Slot* slot = slot_of(*owner, pos);
        if (slot == nullptr || slot->position != pos) {
          return internal_error("KV slot {} holds position {}", pos, slot ? slot->position : -1);
        }
        seen.push_back(slot->token);
      }
      std::span<float> out = logits.subspan(r * vocab, vocab);
      std::fill(out.begin(), out.end(), 0.0f);
      out[static_cast<size_t>(fake_next_token(seen, config_.vocab_size))] = 10.0f;
    }
    return ok_status();
  }

  size_t weight_bytes() const override { return 0; }
  std::string describe() const override { return "fake"; }

  bool fail_next = false;
  int forward_calls = 0;
  size_t max_batch_tokens = 0;

 private:
  struct Slot {
    int32_t token = -1;
    int32_t position = -1;
  };
  Slot* slot_of(const SequenceSlice& s, int pos) {
    size_t b = static_cast<size_t>(pos / block_size_);
    if (b >= s.block_table.size()) return nullptr;
    int32_t block = s.block_table[b];
    if (block < 0 || block >= num_blocks_) return nullptr;
    return &slots_[static_cast<size_t>(block) * block_size_ + pos % block_size_];
  }

  ModelConfig config_;
  int num_blocks_ = 0;
  int block_size_ = 1;
  std::vector<Slot> slots_;
};

}  // namespace hearth::engine::testing
