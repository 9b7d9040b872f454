// The engine over the real CPU backend and the tiny transformers fixtures: greedy output of
// a request is the same run alone, inside a batch of 16 mixed-length requests, and after a
// prefix-cache hit; and the alone run equals transformers' own greedy tokens (goldens.json).
// Also the quantized fixture as the CLI runs it by default on an AVX512-VNNI CPU (int8
// activations, batch-invariant codes).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "kernels/cpu/int8_dot.h"
#include "models/model.h"
#include "recording_sink.h"

namespace hearth::engine {
namespace {

using testing::RecordingSink;

const std::string kFixtures = std::string(HEARTH_SOURCE_DIR) + "/tests/fixtures/models";

const nlohmann::json& goldens() {
  static const nlohmann::json g = [] {
    std::ifstream in(kFixtures + "/goldens.json");
    return nlohmann::json::parse(in);
  }();
  return g;
}

// int8: the CLI's CPU default for a quantized model on an AVX512-VNNI machine (--cpu-int8-dot
// on, --batch-invariant auto = on): int8 activations, codes interleaved by 16 rows.
std::unique_ptr<Engine> make_engine(const std::string& dir, EngineOptions options,
                                    bool int8 = false) {
  LoadOptions load{1, KernelKind::kCpu};
  load.cpu_int8_dot = int8;
  load.batch_invariant = int8;
  auto model = load_model(kFixtures + "/" + dir, load);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return nullptr;
  auto engine = Engine::create(std::move(model).value(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

struct Job {
  std::vector<int32_t> prompt;
  int max_tokens;
};

// 16 prompts of mixed lengths (1 to 70 tokens), some sharing a 24-token stem.
std::vector<Job> mixed_jobs(int32_t vocab) {
  SamplerRng rng(2024);
  std::vector<int32_t> stem;
  for (int i = 0; i < 24; ++i) stem.push_back(static_cast<int32_t>(rng.next_u64() % vocab));
  std::vector<Job> jobs;
  for (int i = 0; i < 16; ++i) {
    int len = 1 + static_cast<int>(rng.next_u64() % 70);
    std::vector<int32_t> prompt;
    if (i % 4 == 0) prompt = stem;
    while (static_cast<int>(prompt.size()) < len || prompt.empty()) {
      prompt.push_back(static_cast<int32_t>(rng.next_u64() % vocab));
    }
    jobs.push_back({prompt, 4 + i % 9});
  }
  return jobs;
}

// Submits every job at once; returns each one's tokens and finish info, in job order.
std::vector<std::shared_ptr<RecordingSink>> run_all(Engine& engine, const std::vector<Job>& jobs) {
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (const Job& job : jobs) {
    sinks.push_back(std::make_shared<RecordingSink>());
    auto id = engine.submit(job.prompt, greedy(job.max_tokens), sinks.back());
    EXPECT_TRUE(id.ok()) << id.status().to_string();
  }
  for (auto& sink : sinks) {
    FinishInfo info = sink->wait();
    EXPECT_EQ(info.reason, FinishReason::kLength) << info.status.to_string();
  }
  return sinks;
}

struct EngineCase {
  std::string variant;  // goldens.json's
  bool int8 = false;    // make_engine's int8
};

class EngineOnCpu : public ::testing::TestWithParam<EngineCase> {};

TEST_P(EngineOnCpu, GreedyIsIdenticalAloneBatchedAndAfterPrefixHit) {
  const std::string name = GetParam().variant + (GetParam().int8 ? " int8" : "");
  const bool int8 = GetParam().int8;
  if (int8 && !kernels::cpu::int8_dot_available()) {
    GTEST_SKIP() << "no AVX512-VNNI int8 kernels on this CPU/build";
  }
  const nlohmann::json& g = goldens()["variants"][GetParam().variant];

  // Alone: one request at a time, no prefix cache, small blocks.
  auto serial =
      make_engine(g["dir"], {.max_batch = 1, .block_size = 4, .prompt_cache_gb = 0}, int8);
  ASSERT_NE(serial, nullptr);
  const int32_t vocab = serial->model().config().vocab_size;

  // The oracle: transformers' 24 greedy tokens for its greedy prompt.
  auto golden_prompt =
      goldens()["prompts"][g["greedy_prompt"].get<int>()]["ids"].get<std::vector<int32_t>>();
  auto golden_tokens = g["greedy_tokens"].get<std::vector<int32_t>>();
  // (int8 activations too: the fixture's greedy margins are 33 or more.)
  auto golden = run_all(*serial, {{golden_prompt, static_cast<int>(golden_tokens.size())}});
  EXPECT_EQ(golden[0]->tokens(), golden_tokens) << name << ": engine vs transformers";

  std::vector<Job> jobs = mixed_jobs(vocab);
  std::vector<std::vector<int32_t>> alone;
  for (const Job& job : jobs) alone.push_back(run_all(*serial, {job})[0]->tokens());
  serial->shutdown();

  // Batched: all 16 at once, chunked prefill (small token budget), shared stems.
  auto batched =
      make_engine(g["dir"], {.max_batch = 16, .max_batched_tokens = 48, .block_size = 4}, int8);
  ASSERT_NE(batched, nullptr);
  auto sinks = run_all(*batched, jobs);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(sinks[i]->tokens(), alone[i]) << name << " job " << i << " batched";
  }
  // Again: now every prompt's full blocks are cached.
  auto again = run_all(*batched, jobs);
  int cached = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(again[i]->tokens(), alone[i]) << name << " job " << i << " after prefix hit";
    cached += again[i]->finish()->cached_tokens;
    if (jobs[i].prompt.size() > 4) {
      EXPECT_GT(again[i]->finish()->cached_tokens, 0) << i;
    }
  }
  EXPECT_GT(cached, 0);
  batched->shutdown();
  EngineStats stats = batched->stats();
  EXPECT_GT(stats.prefix_hit_rate, 0.3);
  EXPECT_EQ(stats.blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineOnCpu,
                         ::testing::Values(EngineCase{"llama-f32"}, EngineCase{"mistral-f32"},
                                           EngineCase{"qwen2-f32"}, EngineCase{"qwen3-f32"},
                                           EngineCase{"qwen3-mlx"}, EngineCase{"qwen3-mlx", true}),
                         [](const auto& info) {
                           std::string n = info.param.variant + (info.param.int8 ? "_int8" : "");
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace hearth::engine
