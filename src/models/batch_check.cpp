// ForwardBatch validation (see batch_check.h).
#include "models/batch_check.h"

#include <algorithm>
#include <vector>

namespace hearth {

Status validate_forward_batch(const ForwardBatch& b, int vocab_size, int num_blocks,
                              int block_size) {
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  if (n == 0) return invalid_argument_error("empty batch");
  if (b.positions.size() != b.tokens.size()) {
    return invalid_argument_error("{} positions for {} tokens", b.positions.size(), n);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= vocab_size) {
      return invalid_argument_error("token id {} outside the vocabulary of {}", b.tokens[i],
                                    vocab_size);
    }
    if (b.positions[i] < 0) return invalid_argument_error("negative position {}", b.positions[i]);
  }
  std::vector<bool> covered(static_cast<std::size_t>(n), false);
  for (const auto& s : b.sequences) {
    if (s.num_tokens <= 0 || s.first_token < 0 || s.num_cached < 0 ||
        static_cast<int64_t>(s.first_token) + s.num_tokens > n) {
      return invalid_argument_error("sequence slice [{}, +{}) outside the {} batch tokens",
                                    s.first_token, s.num_tokens, n);
    }
    const int64_t slots = static_cast<int64_t>(s.num_cached) + s.num_tokens;
    if (static_cast<int64_t>(s.block_table.size()) * block_size < slots) {
      return invalid_argument_error("block table of {} blocks cannot hold {} tokens",
                                    s.block_table.size(), slots);
    }
    for (int64_t i = 0; i < (slots + block_size - 1) / block_size; ++i) {
      if (s.block_table[i] < 0 || s.block_table[i] >= num_blocks) {
        return invalid_argument_error("KV block {} outside 0..{}", s.block_table[i],
                                      num_blocks - 1);
      }
    }
    for (int32_t t = s.first_token; t < s.first_token + s.num_tokens; ++t) {
      if (covered[t]) return invalid_argument_error("token {} is in two sequences", t);
      covered[t] = true;
    }
  }
  if (std::find(covered.begin(), covered.end(), false) != covered.end()) {
    return invalid_argument_error("some batch tokens belong to no sequence");
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || r >= n) return invalid_argument_error("logit row {} outside the batch", r);
  }
  return ok_status();
}

}  // namespace hearth
