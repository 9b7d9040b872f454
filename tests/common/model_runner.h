// Test helper: runs one sequence through a Model step by step (paged KV with the blocks
// handed out in reverse, so they are never contiguous) and returns the last position's
// logits. Shared by the CPU parity tests and the CUDA model tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <span>
#include <vector>

#include "models/model.h"

namespace hearth::tests {

class ModelRunner {
 public:
  explicit ModelRunner(Model& model, int block_size = 4, int num_blocks = 64) : model_(model) {
    EXPECT_TRUE(model.create_kv_cache(num_blocks, block_size).ok());
    for (int b = num_blocks - 1; b >= 0; --b) table_.push_back(b);
  }

  // One forward over `tokens`, appended to what the sequence already holds.
  std::vector<float> step(std::span<const int32_t> tokens) {
    std::vector<int32_t> positions(tokens.size());
    std::iota(positions.begin(), positions.end(), cached_);
    SequenceSlice s{0, static_cast<int32_t>(tokens.size()), cached_, table_};
    int32_t last = static_cast<int32_t>(tokens.size()) - 1;
    ForwardBatch batch{tokens, positions, {&s, 1}, {&last, 1}};
    std::vector<float> logits(static_cast<std::size_t>(model_.config().vocab_size));
    Status st = model_.forward(batch, logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    cached_ += static_cast<int32_t>(tokens.size());
    return logits;
  }

  // The whole prompt in chunks of `chunk` tokens (0: all at once).
  std::vector<float> prefill(const std::vector<int32_t>& ids, std::size_t chunk = 0) {
    std::vector<float> logits;
    const std::size_t c = chunk > 0 ? chunk : ids.size();
    for (std::size_t i = 0; i < ids.size(); i += c) {
      logits = step(std::span(ids).subspan(i, std::min(c, ids.size() - i)));
    }
    return logits;
  }

 private:
  Model& model_;
  std::vector<int32_t> table_;
  int32_t cached_ = 0;
};

}  // namespace hearth::tests
