// Sampler tests: each step against its definition, with hand-computed distributions, a
// brute-force reference for truncation at vocab scale, and fixed-seed frequency tests whose
// bounds are several standard deviations wide.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hearth::engine {
namespace {

std::vector<float> log_of(std::vector<double> probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

void expect_distribution(const std::vector<float>& got, const std::vector<double>& want,
                         double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "token " << i;
}

// Draws `n` tokens with a fixed seed and checks each frequency within 5 sigma of `want`.
void expect_draws_follow(SamplingParams params, const std::vector<float>& logits,
                         const std::vector<double>& want, int n = 20000) {
  params.seed = 1234;
  Sampler sampler(params);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    ++counts[sampler.sample(row, {})];
  }
  for (size_t i = 0; i < want.size(); ++i) {
    double freq = static_cast<double>(counts[i]) / n;
    double sigma = std::sqrt(want[i] * (1 - want[i]) / n);
    EXPECT_NEAR(freq, want[i], 5 * sigma + 1e-9) << "token " << i;
  }
}

TEST(SamplerRng, MatchesPublishedSplitMix64) {
  SamplerRng rng(0);
  EXPECT_EQ(rng.next_u64(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next_u64(), 0x6E789E6AA1B965F4ull);
  SamplerRng a(7), b(7);
  for (int i = 0; i < 100; ++i) {
    double u = a.next_unit();
    EXPECT_EQ(u, b.next_unit());
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Sampler, GreedyTakesArgmaxAndLowestIdOnTies) {
  SamplingParams params;
  params.temperature = 0;
  Sampler sampler(params);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampler.sample(logits, {}), 1);
  params.temperature = 0.7f;
  params.top_k = 1;  // top_k 1 is greedy too
  Sampler top1(params);
  logits = {0.5f, 2.0f, -1.0f, 3.0f};
  EXPECT_EQ(top1.sample(logits, {}), 3);
}

// The greedy argmax runs eight lanes plus a tail: sizes around the lane width and a
// 151,937-token vocab, ties put in different lanes and the tail, NaN and -inf rows, all
// against the plain "first index of the largest value" definition.
TEST(Sampler, GreedyArgmaxMatchesTheDefinitionAtEverySize) {
  SamplingParams params;
  params.temperature = 0;
  Sampler sampler(params);
  SamplerRng rng(7);
  auto reference = [](const std::vector<float>& l) {
    size_t best = 0;
    for (size_t i = 1; i < l.size(); ++i) {
      if (l[i] > l[best]) best = i;
    }
    return static_cast<int32_t>(best);
  };
  for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 1000, 151937}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> logits(n);
      for (float& l : logits) l = static_cast<float>(rng.next_unit() * 20.0 - 10.0);
      if (trial >= 1 && n > 1) {  // a tie for the maximum: the lower id must win
        size_t a = rng.next_u64() % n, b = rng.next_u64() % n;
        logits[a] = logits[b] = 50.0f;
      }
      if (trial == 2) logits[n - 1] = 60.0f;  // the maximum in the tail
      if (trial == 3) logits[rng.next_u64() % n] = std::nanf("");
      if (trial == 4) std::fill(logits.begin(), logits.end(), -INFINITY);
      std::vector<float> clean = logits;
      for (float& l : clean) l = std::isnan(l) ? -INFINITY : l;
      EXPECT_EQ(sampler.sample(logits, {}), reference(clean)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(Sampler, NanLogitsAreNeverChosen) {
  SamplingParams params;
  params.temperature = 0;
  Sampler sampler(params);
  std::vector<float> logits = {std::nanf(""), 1.0f, 0.0f};
  EXPECT_EQ(sampler.sample(logits, {}), 1);
}

TEST(Sampler, LogitBiasIsAdded) {
  SamplingParams params;
  params.temperature = 0;
  params.logit_bias = {{0, 5.0f}, {2, -1.5f}};
  Sampler sampler(params);
  std::vector<float> logits = {1.0f, 4.0f, 3.0f};
  EXPECT_EQ(sampler.sample(logits, {}), 0);
  EXPECT_FLOAT_EQ(logits[0], 6.0f);
  EXPECT_FLOAT_EQ(logits[1], 4.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.5f);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegativeOncePerToken) {
  SamplingParams params;
  params.temperature = 0;
  params.repetition_penalty = 2.0f;
  Sampler sampler(params);
  std::vector<float> logits = {4.0f, -1.0f, 3.0f, 1.0f};
  std::vector<int32_t> prompt = {0, 1, 0};
  std::vector<int32_t> output = {1, 0};
  EXPECT_EQ(sampler.sample(logits, prompt, output), 2);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);   // 4 / 2, once although seen three times
  EXPECT_FLOAT_EQ(logits[1], -2.0f);  // -1 * 2
  EXPECT_FLOAT_EQ(logits[2], 3.0f);
  EXPECT_FLOAT_EQ(logits[3], 1.0f);
  // The scratch marks were cleared: a fresh call with no context changes nothing.
  std::vector<float> again = {4.0f, -1.0f, 3.0f, 1.0f};
  sampler.sample(again, {}, {});
  EXPECT_FLOAT_EQ(again[0], 4.0f);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountOutputTokensOnly) {
  SamplingParams params;
  params.temperature = 0;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  Sampler sampler(params);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<int32_t> prompt = {3, 3, 3};
  std::vector<int32_t> output = {0, 1, 0, 0};
  sampler.sample(logits, prompt, output);
  EXPECT_FLOAT_EQ(logits[0], 1.0f - 0.5f - 0.25f * 3);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
  EXPECT_FLOAT_EQ(logits[3], 1.0f);  // prompt tokens are not penalized
}

TEST(SamplerDistribution, TemperatureSharpensAndFlattens) {
  std::vector<double> p = {0.5, 0.25, 0.15, 0.1};
  SamplingParams params;
  expect_distribution(Sampler::distribution(params, log_of(p), false), p);
  for (float t : {0.5f, 2.0f}) {
    params.temperature = t;
    std::vector<double> want;
    for (double x : p) want.push_back(std::pow(x, 1.0 / t));
    double z = std::accumulate(want.begin(), want.end(), 0.0);
    for (double& x : want) x /= z;
    expect_distribution(Sampler::distribution(params, log_of(p), false), want);
  }
}

TEST(SamplerDistribution, TopKTopPMinPXtcByDefinition) {
  std::vector<float> logits = log_of({0.5, 0.25, 0.15, 0.1});
  SamplingParams params;
  params.top_k = 2;
  expect_distribution(Sampler::distribution(params, logits, false), {2.0 / 3, 1.0 / 3, 0, 0});

  params = {};
  params.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: two tokens
  expect_distribution(Sampler::distribution(params, logits, false), {2.0 / 3, 1.0 / 3, 0, 0});
  params.top_p = 0.5f;  // the top token alone reaches 0.5
  expect_distribution(Sampler::distribution(params, logits, false), {1, 0, 0, 0});
  params.top_p = 0.85f;  // 0.75 < 0.85 <= 0.9: three tokens
  expect_distribution(Sampler::distribution(params, logits, false),
                      {0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0});

  params = {};
  params.min_p = 0.25f;  // keeps p >= 0.125
  expect_distribution(Sampler::distribution(params, logits, false),
                      {0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0});

  params = {};
  params.xtc_probability = 1;
  params.xtc_threshold = 0.2f;  // 0.5 and 0.25 qualify; 0.25 (the least) stays
  expect_distribution(Sampler::distribution(params, logits, true), {0, 0.5, 0.3, 0.2});
  params.xtc_threshold = 0.3f;  // only one token qualifies: no change
  expect_distribution(Sampler::distribution(params, logits, true), {0.5, 0.25, 0.15, 0.1});
}

TEST(SamplerDistribution, TopPSeesTheTopKRenormalizedDistribution) {
  std::vector<float> logits = log_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams params;
  params.top_p = 0.75f;  // alone: 0.4, 0.7 < 0.75, so three tokens
  expect_distribution(Sampler::distribution(params, logits, false),
                      {0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0});
  params.top_k = 3;  // renormalized 0.444, 0.778 >= 0.75: two tokens
  expect_distribution(Sampler::distribution(params, logits, false), {4.0 / 7, 3.0 / 7, 0, 0});
}

// Brute force: sort the whole vocab, keep the smallest prefix reaching top_p.
std::vector<double> reference_top_p(const std::vector<float>& logits, double top_p) {
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += p[i] = std::exp(static_cast<double>(logits[i]));
  for (double& x : p) x /= z;
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  std::vector<double> want(p.size(), 0.0);
  double mass = 0;
  size_t k = 0;
  while (k < order.size() && mass < top_p) mass += p[order[k++]];
  for (size_t i = 0; i < k; ++i) want[order[i]] = p[order[i]] / mass;
  return want;
}

TEST(SamplerDistribution, TopPAtVocabScaleMatchesFullSort) {
  SamplerRng rng(99);
  std::vector<float> logits(100000);
  for (float& l : logits) l = static_cast<float>(6 * rng.next_unit());
  for (float top_p : {0.0001f, 0.01f, 0.1f, 0.5f, 0.99f}) {
    SamplingParams params;
    params.top_p = top_p;
    std::vector<float> got = Sampler::distribution(params, logits, false);
    std::vector<double> want = reference_top_p(logits, top_p);
    int kept = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      kept += got[i] > 0;
      ASSERT_NEAR(got[i], want[i], 1e-7) << "top_p " << top_p << " token " << i;
    }
    EXPECT_GT(kept, 0);
  }
}

TEST(Sampler, DrawsFollowTheTruncatedDistribution) {
  std::vector<float> logits = log_of({0.35, 0.25, 0.2, 0.1, 0.06, 0.04});
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 5;
  params.top_p = 0.9f;
  params.min_p = 0.1f;
  std::vector<float> want_f = Sampler::distribution(params, logits, false);
  std::vector<double> want(want_f.begin(), want_f.end());
  EXPECT_EQ(want[5], 0.0);
  expect_draws_follow(params, logits, want);

  params = {};  // untruncated: plain softmax
  expect_draws_follow(params, logits, {0.35, 0.25, 0.2, 0.1, 0.06, 0.04});
}

TEST(Sampler, XtcFiresWithItsProbability) {
  std::vector<float> logits = log_of({0.5, 0.25, 0.15, 0.1});
  SamplingParams params;
  params.xtc_probability = 0.5f;
  params.xtc_threshold = 0.2f;
  // Half the time {0.5,.25,.15,.1}, half the time {0,.5,.3,.2}.
  expect_draws_follow(params, logits, {0.25, 0.375, 0.225, 0.15});
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  SamplerRng gen(5);
  std::vector<float> logits(1000);
  for (float& l : logits) l = static_cast<float>(3 * gen.next_unit());
  auto run = [&](uint64_t seed) {
    SamplingParams params;
    params.seed = seed;
    params.top_p = 0.9f;
    params.temperature = 1.3f;
    Sampler sampler(params);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 50; ++i) {
      std::vector<float> row = logits;
      tokens.push_back(sampler.sample(row, tokens));
    }
    return tokens;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  double z = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0));
  SamplingParams params;
  params.temperature = 0;
  params.logprobs = 2;
  params.logit_bias = {{0, 10.0f}};  // changes the choice, not the reported distribution
  Sampler sampler(params);
  TokenLogprobs lp;
  std::vector<float> row = logits;
  EXPECT_EQ(sampler.sample(row, {}, &lp), 0);
  EXPECT_EQ(lp.token, 0);
  EXPECT_NEAR(lp.logprob, 1.0 - z, 1e-6);
  EXPECT_EQ(lp.rank, 3);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].token, 1);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - z, 1e-6);
  EXPECT_EQ(lp.top[1].token, 2);
  EXPECT_NEAR(lp.top[1].logprob, 2.0 - z, 1e-6);

  params.logprobs = 0;  // the sampled token only
  params.temperature = 5;
  Sampler hot(params);
  row = logits;
  int32_t token = hot.sample(row, {}, &lp);
  EXPECT_TRUE(lp.top.empty());
  EXPECT_NEAR(lp.logprob, logits[token] - z, 1e-6);  // temperature does not change it
}

TEST(SamplingParams, ValidateRejectsOutOfRangeValues) {
  EXPECT_TRUE(SamplingParams{}.validate(100).ok());
  auto bad = [](auto edit) {
    SamplingParams p;
    edit(p);
    return !p.validate(100).ok();
  };
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = std::nanf(""); }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 1.5f; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_k = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.min_p = 2; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.xtc_probability = -0.1f; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.repetition_penalty = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.presence_penalty = 3; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.frequency_penalty = -3; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.max_tokens = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.logprobs = -2; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.stop_token_ids = {-1}; }));
  SamplingParams p;
  p.logit_bias = {{7, 1.0f}};
  Status status = p.validate(5);
  EXPECT_NE(status.message().find("logit_bias token id 7"), std::string::npos);
}

}  // namespace
}  // namespace hearth::engine
