// On-device sampling: greedy ties, logit_bias, penalties, and the truncations (top-k,
// top-p, min-p) checked by drawing many times with different steps and comparing the set
// of drawn ids and their frequencies with the distribution computed on the host.
#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/cuda/sampling.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

class SamplingTest : public CudaTest {
 protected:
  // Samples `rows` copies of `logits` (one per SamplingRow) and returns the ids.
  // with_params false: no parameter image (the plain split argmax reads none).
  std::vector<int32_t> sample(const std::vector<float>& logits, int vocab,
                              const std::vector<SamplingRow>& rows, SamplingArgs extra = {},
                              bool with_params = true) {
    int n = static_cast<int>(rows.size());
    const int64_t ld = vocab + 3;
    std::vector<float> all(n * ld, 0.0f);
    for (int r = 0; r < n; ++r) std::copy(logits.begin(), logits.end(), &all[r * ld]);
    DeviceBuffer dl = upload(all);
    DeviceBuffer dp = upload(rows);
    DeviceBuffer dout = poisoned<int32_t>(n);
    auto ws = ctx_->allocate(sampling_workspace_bytes(n, vocab), "counts");
    EXPECT_TRUE(ws.ok());
    SamplingArgs a = extra;
    a.logits = dl.as<float>();
    a.ld_logits = ld;
    a.rows = n;
    a.vocab = vocab;
    a.params = with_params ? dp.as<SamplingRow>() : nullptr;
    a.counts = ws->as<int32_t>();
    a.out_tokens = dout.as<int32_t>();
    EXPECT_EQ(sample_tokens(a, ctx_->stream()), cudaSuccess);
    return download<int32_t>(dout, n);
  }

  // Draw `n` times (steps 0..n-1) and count ids.
  std::map<int32_t, int> histogram(const std::vector<float>& logits, int vocab, SamplingRow p,
                                   int n) {
    std::vector<SamplingRow> rows(n, p);
    for (int i = 0; i < n; ++i) rows[i].step = i;
    std::map<int32_t, int> counts;
    for (int32_t id : sample(logits, vocab, rows)) ++counts[id];
    return counts;
  }
};

// Logits with a known head: ids 4000, 17, 5124, 900 carry probability 0.5, 0.3, 0.15, 0.05
// of the head (at temperature 1) and everything else is far below.
std::vector<float> head_logits(int vocab) {
  std::vector<float> l(vocab, -30.0f);
  l[4000] = std::log(0.5f);
  l[17] = std::log(0.3f);
  l[5124] = std::log(0.15f);
  l[900] = std::log(0.05f);
  return l;
}

TEST_F(SamplingTest, GreedyTakesArgmaxLowestIdOnTies) {
  const int vocab = 5125;
  auto logits = random_bf16_values(vocab, 71);
  logits[3001] = 9.0f;
  logits[77] = 9.0f;
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  SamplingRow top1;
  top1.top_k = 1;
  auto ids = sample(logits, vocab, {greedy, top1});
  EXPECT_EQ(ids[0], 77);
  EXPECT_EQ(ids[1], 77);
}

// A Llama-3 sized vocab + 3 (the float4 path's batches, its remainder and a scalar tail of 3
// ids): row 0 starts 16-byte aligned (vector path), row 1 does not (ld = vocab + 3: scalar
// path). Ties far apart in different batches and lanes still resolve to the lowest id.
TEST_F(SamplingTest, GreedyArgmaxOverALargeVocabAlignedOrNot) {
  const int vocab = 128259;
  auto logits = random_bf16_values(vocab, 72);
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  logits[100001] = 9.0f;
  logits[4099] = 9.0f;
  logits[4102] = 9.0f;
  auto ids = sample(logits, vocab, {greedy, greedy});
  EXPECT_EQ(ids[0], 4099);
  EXPECT_EQ(ids[1], 4099);
  logits[vocab - 1] = 9.5f;  // the scalar tail
  ids = sample(logits, vocab, {greedy, greedy});
  EXPECT_EQ(ids[0], vocab - 1);
  EXPECT_EQ(ids[1], vocab - 1);
}

// The split argmax (every row greedy, blocks of 4096 ids meeting in a zeroed state): the
// same ids as one block a row, ties across blocks to the lowest id, and its slots left zero
// so the next call (same state, no re-zeroing) is right again.
TEST_F(SamplingTest, SplitGreedyArgmaxMatchesAndLeavesItsStateZero) {
  const int vocab = 128259;
  auto logits = random_bf16_values(vocab, 73);
  logits[100001] = 9.0f;
  logits[4099] = 9.0f;  // another block, same value: the lower id wins
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  SamplingRow top1;
  top1.top_k = 1;
  const int rows = 3;
  auto state = ctx_->allocate(greedy_workspace_bytes(rows), "greedy state");
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(cudaMemsetAsync(state->data(), 0, greedy_workspace_bytes(rows), ctx_->stream()),
            cudaSuccess);
  SamplingArgs split;
  split.all_greedy = true;
  split.greedy_state = state->data();
  for (int round = 0; round < 2; ++round) {
    auto ids = sample(logits, vocab, {greedy, top1, greedy}, split);
    EXPECT_EQ(ids, (std::vector<int32_t>{4099, 4099, 4099})) << "round " << round;
  }
  logits[vocab - 1] = 9.5f;  // the last block's scalar tail
  auto ids = sample(logits, vocab, {greedy, greedy, greedy}, split);
  EXPECT_EQ(ids, (std::vector<int32_t>{vocab - 1, vocab - 1, vocab - 1}));
  // The plain split (no bias, no penalty) reads no parameters and may launch under PDL, as
  // the decode graph's last kernel: the same ids. PDL with a bias list is refused (checked
  // before anything is read: the pointers are never dereferenced).
  SamplingArgs pdl = split;
  pdl.pdl = ctx_->properties().major >= 9;
  ids = sample(logits, vocab, {greedy, greedy, greedy}, pdl, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{vocab - 1, vocab - 1, vocab - 1}));
  SamplingArgs biased = pdl;
  biased.pdl = true;
  biased.logits = reinterpret_cast<float*>(state->data());
  biased.ld_logits = vocab;
  biased.rows = rows;
  biased.vocab = vocab;
  biased.out_tokens = reinterpret_cast<int32_t*>(state->data());
  biased.bias_offsets = reinterpret_cast<const int32_t*>(state->data());
  EXPECT_EQ(sample_tokens(biased, ctx_->stream()), cudaErrorInvalidValue);
  std::vector<unsigned char> left(greedy_workspace_bytes(rows), 1);
  ASSERT_EQ(cudaMemcpy(left.data(), state->data(), left.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](unsigned char b) { return b == 0; }));
}

TEST_F(SamplingTest, TopKTopPMinPKeepTheRightSets) {
  const int vocab = 5125;
  auto logits = head_logits(vocab);
  SamplingRow p;
  p.seed = 1234;
  p.top_k = 2;
  auto k2 = histogram(logits, vocab, p, 4000);
  EXPECT_EQ(k2.size(), 2u);
  // 0.5 / 0.8 = 0.625 of the draws; 4000 draws: stddev 0.008, allow 5 sigma.
  EXPECT_NEAR(k2[4000] / 4000.0, 0.625, 0.04);

  p.top_k = 0;
  p.top_p = 0.7f;  // 0.5 + 0.3 reaches 0.7 (of the head's mass, ~1)
  auto tp = histogram(logits, vocab, p, 2000);
  EXPECT_EQ(tp.size(), 2u);
  EXPECT_TRUE(tp.count(4000) && tp.count(17));

  p.top_p = 1.0f;
  p.min_p = 0.25f;  // keeps p >= 0.125: ids 4000, 17, 5124
  auto mp = histogram(logits, vocab, p, 4000);
  EXPECT_EQ(mp.size(), 3u);
  EXPECT_NEAR(mp[5124] / 4000.0, 0.15 / 0.95, 0.03);

  p.min_p = 0.0f;  // full distribution: frequencies follow the probabilities
  auto all = histogram(logits, vocab, p, 8000);
  EXPECT_NEAR(all[4000] / 8000.0, 0.5, 0.03);
  EXPECT_NEAR(all[17] / 8000.0, 0.3, 0.03);
  EXPECT_NEAR(all[900] / 8000.0, 0.05, 0.015);
}

TEST_F(SamplingTest, TemperatureFlattensAndSeedRepeats) {
  const int vocab = 769;
  auto logits = head_logits(vocab + 5000);
  logits.resize(vocab);
  logits[600] = std::log(0.5f);
  logits[17] = std::log(0.3f);
  SamplingRow p;
  p.temperature = 4.0f;
  p.top_k = 2;
  auto hot = histogram(logits, vocab, p, 4000);
  double want = 1.0 / (1.0 + std::pow(0.3 / 0.5, 1.0 / 4.0));  // p(600) at T=4
  EXPECT_NEAR(hot[600] / 4000.0, want, 0.04);
  std::vector<SamplingRow> same(4, p);
  for (auto& r : same) r.step = 99;
  auto ids = sample(logits, vocab, same);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[0], ids[3]);
}

TEST_F(SamplingTest, LogitBiasAndPenaltiesChangeTheArgmax) {
  const int vocab = 5125;
  std::vector<float> logits(vocab, 0.0f);
  logits[10] = 5.0f;
  logits[20] = 4.0f;
  logits[30] = -1.0f;
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  // Row 0: bias bans 10. Row 1: repetition penalty 2 on 10 (5 -> 2.5). Row 2: frequency
  // penalty 0.6 x 2 occurrences of 10 (5 -> 3.8). Row 3: presence penalty 0.5 on 10 -> 4.5.
  std::vector<SamplingRow> rows(4, greedy);
  rows[1].repetition_penalty = 2.0f;
  rows[2].frequency_penalty = 0.6f;
  rows[3].presence_penalty = 0.5f;
  std::vector<int32_t> bias_offsets = {0, 1, 1, 1, 1};
  std::vector<int32_t> bias_ids = {10};
  std::vector<float> bias_values = {-100.0f};
  std::vector<int32_t> rep_offsets = {0, 0, 2, 2, 2};
  std::vector<int32_t> rep_tokens = {10, 10};
  std::vector<int32_t> freq_offsets = {0, 0, 0, 2, 3};
  std::vector<int32_t> freq_tokens = {10, 10, 10};
  DeviceBuffer d1 = upload(bias_offsets), d2 = upload(bias_ids), d3 = upload(bias_values);
  DeviceBuffer d4 = upload(rep_offsets), d5 = upload(rep_tokens);
  DeviceBuffer d6 = upload(freq_offsets), d7 = upload(freq_tokens);
  SamplingArgs extra;
  extra.bias_offsets = d1.as<int32_t>();
  extra.bias_ids = d2.as<int32_t>();
  extra.bias_values = d3.as<float>();
  extra.repetition_offsets = d4.as<int32_t>();
  extra.repetition_tokens = d5.as<int32_t>();
  extra.frequency_offsets = d6.as<int32_t>();
  extra.frequency_tokens = d7.as<int32_t>();
  auto ids = sample(logits, vocab, rows, extra);
  EXPECT_EQ(ids[0], 20);
  EXPECT_EQ(ids[1], 20);
  EXPECT_EQ(ids[2], 20);
  EXPECT_EQ(ids[3], 10);
}

}  // namespace
}  // namespace hearth::cuda::testing
