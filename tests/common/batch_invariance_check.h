// Test helper: a model loaded with --batch-invariant gives each prompt's last-row logits the
// same bits prefilled alone in one step, in chunks of 5 tokens, and in one step with the other
// prompts; and a decode row the same bits alone and beside a prefill. Shared by the CPU
// (int8) and CUDA (bf16) model tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <numeric>
#include <span>
#include <vector>

#include "models/model.h"

namespace hearth::tests {

// prompts: at least 4 (the decode row continues prompt 1 beside a prefill of prompt 3).
inline void expect_batch_invariant_logits(Model& m,
                                          const std::vector<std::vector<int32_t>>& prompts) {
  ASSERT_GE(prompts.size(), 4u);
  constexpr int kBlock = 4;
  constexpr int kBlocks = 512;
  ASSERT_TRUE(m.create_kv_cache(kBlocks, kBlock).ok());
  const int vocab = m.config().vocab_size;
  std::deque<std::vector<int32_t>> tables;  // SequenceSlice holds spans into these
  int next_block = 0;
  auto fresh_table = [&](int tokens) -> std::span<const int32_t> {
    std::vector<int32_t> t((tokens + kBlock - 1) / kBlock);
    std::iota(t.begin(), t.end(), next_block);
    next_block += static_cast<int>(t.size());
    EXPECT_LE(next_block, kBlocks);
    return tables.emplace_back(std::move(t));
  };
  auto run = [&](const std::vector<SequenceSlice>& seqs, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& positions, const std::vector<int32_t>& rows) {
    std::vector<float> logits(rows.size() * vocab);
    Status st = m.forward(ForwardBatch{tokens, positions, seqs, rows}, logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return logits;
  };
  auto slice_of = [&](const std::vector<float>& all, int r) {
    return std::vector<float>(all.begin() + std::size_t(r) * vocab,
                              all.begin() + std::size_t(r + 1) * vocab);
  };
  auto iota_from = [](int from, int count) {
    std::vector<int32_t> v(count);
    std::iota(v.begin(), v.end(), from);
    return v;
  };
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) {
    const int len = static_cast<int>(p.size());
    alone.push_back(run({{0, len, 0, fresh_table(len + 1)}}, p, iota_from(0, len), {len - 1}));
  }
  // In chunks of 5 tokens.
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const int len = static_cast<int>(prompts[i].size());
    std::span<const int32_t> table = fresh_table(len);
    std::vector<float> last;
    for (int c0 = 0; c0 < len; c0 += 5) {
      const int count = std::min(5, len - c0);
      std::vector<int32_t> chunk(prompts[i].begin() + c0, prompts[i].begin() + c0 + count);
      last = run({{0, count, c0, table}}, chunk, iota_from(c0, count), {count - 1});
    }
    EXPECT_EQ(last, alone[i]) << "prompt " << i << " in chunks of 5";
  }
  // All prompts in one step.
  std::vector<SequenceSlice> seqs;
  std::vector<int32_t> tokens, positions, rows;
  for (const auto& p : prompts) {
    const int len = static_cast<int>(p.size());
    seqs.push_back({static_cast<int32_t>(tokens.size()), len, 0, fresh_table(len)});
    tokens.insert(tokens.end(), p.begin(), p.end());
    const std::vector<int32_t> pos = iota_from(0, len);
    positions.insert(positions.end(), pos.begin(), pos.end());
    rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
  }
  const std::vector<float> together = run(seqs, tokens, positions, rows);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(slice_of(together, static_cast<int>(i)), alone[i]) << "prompt " << i;
  }
  // A decode row of prompt 1 (its alone run's blocks, one slot left), alone and beside a
  // prefill of prompt 3.
  const int len1 = static_cast<int>(prompts[1].size());
  const SequenceSlice decode{0, 1, len1, tables[1]};
  const std::vector<float> decode_alone = run({decode}, {7}, {len1}, {0});
  const int len3 = static_cast<int>(prompts[3].size());
  std::vector<int32_t> mixed_tokens = prompts[3];
  mixed_tokens.push_back(7);
  std::vector<int32_t> mixed_pos = iota_from(0, len3);
  mixed_pos.push_back(len1);
  SequenceSlice decode_second = decode;
  decode_second.first_token = len3;
  const std::vector<float> mixed =
      run({{0, len3, 0, fresh_table(len3)}, decode_second}, mixed_tokens, mixed_pos, {len3});
  EXPECT_EQ(mixed, decode_alone) << "decode row beside a prefill";
}

}  // namespace hearth::tests
