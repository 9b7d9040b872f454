// Engine tests with the fake model: concurrent submission from several threads, admission
// errors at submit, cancellation, shutdown with requests in flight, stats.
#include "engine/engine.h"

#include "engine/benchmark.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "fake_model.h"
#include "recording_sink.h"

namespace hearth::engine {
namespace {

using testing::fake_greedy;
using testing::FakeModel;
using testing::RecordingSink;

constexpr int32_t kVocab = 50;

std::unique_ptr<Engine> make_engine(EngineOptions options, int max_context = 256) {
  auto engine = Engine::create(std::make_unique<FakeModel>(kVocab, max_context), options);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  return std::move(engine).value();
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

std::vector<int32_t> prompt_for(int i) {
  std::vector<int32_t> t;
  for (int j = 0; j < 3 + i % 17; ++j) t.push_back((i * 13 + j * 5) % kVocab);
  return t;
}

TEST(Engine, ConcurrentSubmittersAllGetTheirReferenceTokens) {
  auto engine = make_engine({.max_batch = 4, .block_size = 4, .num_blocks = 40});
  constexpr int kThreads = 4, kPerThread = 8;
  std::vector<std::shared_ptr<RecordingSink>> sinks(kThreads * kPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k) {
        int i = t * kPerThread + k;
        sinks[i] = std::make_shared<RecordingSink>();
        auto id = engine->submit(prompt_for(i), greedy(5 + i % 7), sinks[i]);
        EXPECT_TRUE(id.ok()) << id.status().to_string();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    FinishInfo info = sinks[i]->wait();
    EXPECT_EQ(info.reason, FinishReason::kLength);
    EXPECT_EQ(info.prompt_tokens, static_cast<int>(prompt_for(i).size()));
    EXPECT_EQ(sinks[i]->tokens(), fake_greedy(prompt_for(i), 5 + i % 7, kVocab)) << i;
  }
  engine->shutdown();  // stats are a snapshot taken after each step: let the last one land
  EngineStats s = engine->stats();
  EXPECT_EQ(s.requests_finished, kThreads * kPerThread);
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.blocks_total, 40);
}

TEST(Engine, SubmitReturnsAdmissionErrorsAndNeverCallsTheSink) {
  auto engine = make_engine({.block_size = 4, .num_blocks = 4}, /*max_context=*/32);
  auto sink = std::make_shared<RecordingSink>();
  auto over_context = engine->submit(prompt_for(1), greedy(40), sink);
  ASSERT_FALSE(over_context.ok());
  EXPECT_EQ(over_context.status().code(), ErrorCode::kOutOfRange);
  auto over_kv = engine->submit(prompt_for(1), greedy(20), sink);  // 4 + 20 - 1 > 16
  ASSERT_FALSE(over_kv.ok());
  EXPECT_NE(over_kv.status().message().find("--kv-budget"), std::string::npos);
  SamplingParams bad = greedy(2);
  bad.temperature = -1;
  EXPECT_FALSE(engine->submit(prompt_for(1), bad, sink).ok());
  engine->shutdown();
  EXPECT_EQ(sink->finish_calls(), 0);
}

// A sink that cancels its own request from the engine thread after `after` tokens.
class CancellingSink : public RecordingSink {
 public:
  CancellingSink(Engine* engine, int after) : engine_(engine), after_(after) {}
  void on_tokens(std::span<const int32_t> tokens,
                 std::span<const TokenLogprobs> logprobs) override {
    RecordingSink::on_tokens(tokens, logprobs);
    if (++seen_ == after_) {
      // Test-only wait (sinks must not block in production) until submit() returned the id.
      while (id.load() == 0) std::this_thread::yield();
      engine_->cancel(id.load());
    }
  }
  std::atomic<RequestId> id{0};

 private:
  Engine* engine_;
  int after_;
  int seen_ = 0;
};

TEST(Engine, CancelStopsARunningRequestAndFreesItsBlocks) {
  auto engine = make_engine({.max_batch = 1, .block_size = 4, .num_blocks = 64});
  auto sink = std::make_shared<CancellingSink>(engine.get(), 3);
  auto id = engine->submit(prompt_for(2), greedy(200), sink);
  ASSERT_TRUE(id.ok());
  sink->id = *id;
  FinishInfo info = sink->wait();
  EXPECT_EQ(info.reason, FinishReason::kCancelled);
  // Cancelled at the step after the 3rd token: no more tokens were produced.
  EXPECT_EQ(sink->tokens().size(), 3u);
  auto follow = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->submit(prompt_for(3), greedy(2), follow).ok());
  follow->wait();
  engine->shutdown();
  EXPECT_EQ(engine->stats().blocks_used, 0);
}

TEST(Engine, ShutdownFinishesOutstandingRequestsAsCancelled) {
  auto engine = make_engine({.max_batch = 1, .block_size = 4, .num_blocks = 64});
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 4; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(engine->submit(prompt_for(i), greedy(200), sinks.back()).ok());
  }
  engine->shutdown();
  for (auto& sink : sinks) {
    ASSERT_EQ(sink->finish_calls(), 1);
    FinishReason reason = sink->finish()->reason;
    EXPECT_TRUE(reason == FinishReason::kCancelled || reason == FinishReason::kLength);
  }
  auto late = engine->submit(prompt_for(1), greedy(2), std::make_shared<RecordingSink>());
  EXPECT_EQ(late.status().code(), ErrorCode::kUnavailable);
  engine->shutdown();  // idempotent
}

// Submitters, cancellers, stats readers and several shutdown callers at once (run under
// ThreadSanitizer in its own build, see docs/architecture.md "Build"): every accepted request
// finishes exactly once and every shutdown call returns with the thread joined.
TEST(Engine, ConcurrentSubmitCancelStatsAndShutdown) {
  auto engine = make_engine({.max_batch = 3, .block_size = 2, .num_blocks = 30});
  std::vector<std::shared_ptr<RecordingSink>> sinks(40);
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 20; ++k) {
        int i = t * 20 + k;
        sinks[i] = std::make_shared<RecordingSink>();
        auto id = engine->submit(prompt_for(i), greedy(30), sinks[i]);
        if (!id.ok()) {
          EXPECT_EQ(id.status().code(), ErrorCode::kUnavailable);  // shut down meanwhile
          continue;
        }
        ++accepted;
        if (k % 3 == 0) engine->cancel(*id);
      }
    });
  }
  threads.emplace_back([&] {
    for (int k = 0; k < 200; ++k) {
      EngineStats s = engine->stats();
      EXPECT_LE(s.blocks_used, s.blocks_total);
    }
  });
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      engine->shutdown();
    });
  }
  for (auto& th : threads) th.join();
  int finished = 0;
  for (auto& sink : sinks) {
    if (sink && sink->finish_calls() > 0) {
      EXPECT_EQ(sink->finish_calls(), 1);
      ++finished;
    }
  }
  EXPECT_EQ(finished, accepted.load());
  EXPECT_EQ(engine->stats().blocks_used, 0);
}

TEST(Engine, PlansThePoolFromTheBudgets) {
  FakeModel model(kVocab, 1000);  // 8 bytes per token slot
  EngineOptions options{.max_batch = 2, .block_size = 10};
  auto plan = plan_scheduler(model, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_blocks, 2 * 100);  // two full-context sequences
  EXPECT_EQ(plan->max_idle_cached_blocks, -1);
  options.kv_budget_gb = 8e-6;  // 8000 bytes = 100 blocks of 80 bytes
  options.prompt_cache_gb = 1.6e-6;
  plan = plan_scheduler(model, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_blocks, 100);
  EXPECT_EQ(plan->max_idle_cached_blocks, 20);
  options.prompt_cache_gb = 0;
  EXPECT_EQ(plan_scheduler(model, options)->max_idle_cached_blocks, 0);
  options.kv_budget_gb = 1e-12;
  EXPECT_FALSE(plan_scheduler(model, options).ok());
  options.kv_budget_gb = 0;
  options.max_batch = 0;
  EXPECT_FALSE(plan_scheduler(model, options).ok());
}

TEST(Engine, SizesThePoolFromDeviceMemoryAndTheMemoryBudget) {
  FakeModel model(kVocab, 1000);  // blocks of 10 tokens = 80 bytes; 0 weight bytes
  EngineOptions options{.max_batch = 1000, .block_size = 10};
  options.device_memory = kv::DeviceMemory{.total_bytes = 100'000, .free_bytes = 100'000};
  options.headroom_gb = 0;
  auto plan = plan_scheduler(model, options);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->num_blocks, 1125);  // 0.9 (GPU default) x 100000 bytes / 80
  options.gpu_memory_utilization = 0.5;
  EXPECT_EQ(plan_scheduler(model, options)->num_blocks, 625);
  options.memory_budget_gb = 2e-5;  // 20000 bytes
  EXPECT_EQ(plan_scheduler(model, options)->num_blocks, 250);
  options.headroom_gb = 1e-5;  // 10000 of the 20000 budget bytes
  EXPECT_EQ(plan_scheduler(model, options)->num_blocks, 125);
  options.headroom_gb = 2e-5;  // the budget holds nothing else
  auto none = plan_scheduler(model, options);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--memory-budget"), std::string::npos);
  options.headroom_gb = 0;
  options.gpu_memory_utilization = 1.5;
  EXPECT_FALSE(plan_scheduler(model, options).ok());
  options.gpu_memory_utilization = 0;
  options.memory_budget_gb = -1;
  EXPECT_FALSE(plan_scheduler(model, options).ok());

  // CPU (no device figures): RAM from /proc/meminfo; a 1 MB budget binds before it.
  options.device_memory.reset();
  options.memory_budget_gb = 1e-3;
  EXPECT_EQ(plan_scheduler(model, options)->num_blocks, 12'500);
  // An impossible budget fails Engine::create with the flag's name, before any thread.
  options.memory_budget_gb = 1e-7;  // 100 bytes: one block, but not the estimated headroom
  options.headroom_gb = -1;
  auto engine = Engine::create(std::make_unique<FakeModel>(kVocab, 1000), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("--memory-budget"), std::string::npos);
}

// Engine::create hands the model its step sizes to warm up on before the first step, once,
// unless EngineOptions::warm_up is off (as `generate` sets it); a failed warm-up costs only
// speed, so the engine still starts and serves.
TEST(Engine, WarmsTheModelUpWithItsStepSizes) {
  struct WarmFake : FakeModel {
    WarmFake(std::vector<std::pair<int, int>>* calls, bool fail)
        : FakeModel(kVocab, 256), calls_(calls), fail_(fail) {}
    Status warm_up(int max_tokens, int max_rows) override {
      calls_->emplace_back(max_tokens, max_rows);
      return fail_ ? internal_error("injected warm-up failure") : ok_status();
    }
    std::vector<std::pair<int, int>>* calls_;
    bool fail_;
  };
  EngineOptions options;
  options.max_batch = 6;
  options.max_batched_tokens = 300;
  std::vector<std::pair<int, int>> calls;
  {
    auto engine = Engine::create(std::make_unique<WarmFake>(&calls, false), options);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  }
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(300, 6));
  options.warm_up = false;
  {
    auto engine = Engine::create(std::make_unique<WarmFake>(&calls, false), options);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  }
  EXPECT_EQ(calls.size(), 1u);
  options.warm_up = true;
  auto failed = Engine::create(std::make_unique<WarmFake>(&calls, true), options);
  ASSERT_TRUE(failed.ok()) << failed.status().to_string();
  EXPECT_EQ(calls.size(), 2u);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE((*failed)->submit({1, 2, 3}, greedy(4), sink).ok());
  sink->wait();
  EXPECT_EQ(sink->tokens().size(), 4u);
}

// The step token budget defaults to max(2048, batch) for a model on a GPU (it reports its
// device memory), max(8192, batch) on a GPU of 70 GiB or more and max(512, batch) on CPU; an
// explicit budget is kept.
TEST(Engine, DefaultsTheStepBudgetByBackend) {
  struct DeviceFake : FakeModel {
    DeviceFake(int32_t vocab, int context, uint64_t total)
        : FakeModel(vocab, context), total_(total) {}
    std::optional<DeviceMemoryUsage> device_memory() const override {
      return DeviceMemoryUsage{.total_bytes = total_, .free_bytes = 1'000'000};
    }
    uint64_t total_;
  };
  FakeModel cpu(kVocab, 1000);
  DeviceFake gpu(kVocab, 1000, 24ull << 30);
  DeviceFake small_h100(kVocab, 1000, (70ull << 30) - 1);
  DeviceFake h200(kVocab, 1000, 141ull << 30);
  EngineOptions options{.max_batch = 4, .block_size = 10, .num_blocks = 100};
  EXPECT_EQ(plan_scheduler(cpu, options)->max_batched_tokens, kDefaultCpuBatchedTokens);
  EXPECT_EQ(plan_scheduler(gpu, options)->max_batched_tokens, kDefaultGpuBatchedTokens);
  EXPECT_EQ(plan_scheduler(small_h100, options)->max_batched_tokens, 2048);
  EXPECT_EQ(plan_scheduler(h200, options)->max_batched_tokens, 8192);
  EXPECT_EQ(plan_scheduler(h200, options)->max_batched_tokens, kDefaultLargeGpuBatchedTokens);
  options.max_batch = 3000;  // every running sequence's decode row fits in one step
  EXPECT_EQ(plan_scheduler(cpu, options)->max_batched_tokens, 3000);
  EXPECT_EQ(plan_scheduler(gpu, options)->max_batched_tokens, 3000);
  options.max_batched_tokens = 700;
  EXPECT_EQ(plan_scheduler(gpu, options)->max_batched_tokens, 700);
}

TEST(ThroughputMeter, RatesCoverOnlyTheWindow) {
  constexpr int64_t kS = 1'000'000'000;
  ThroughputMeter meter(2.0);  // 2 s window
  double p = -1, g = -1;
  meter.rates(0, p, g);
  EXPECT_EQ(p, 0);
  EXPECT_EQ(g, 0);
  meter.record(0, 100, 0);
  meter.record(1 * kS, 0, 10);
  meter.record(2 * kS, 20, 4);
  meter.rates(2 * kS, p, g);
  EXPECT_DOUBLE_EQ(p, 60);        // (100 + 20) / 2 s
  EXPECT_DOUBLE_EQ(g, 7);         // (10 + 4) / 2 s
  meter.rates(2 * kS + 1, p, g);  // the first sample just left the window
  EXPECT_DOUBLE_EQ(p, 10);
  EXPECT_DOUBLE_EQ(g, 7);
  meter.record(4 * kS, 0, 2);  // drops the samples older than 2 s before now
  meter.rates(4 * kS, p, g);
  EXPECT_DOUBLE_EQ(p, 10);
  EXPECT_DOUBLE_EQ(g, 3);
  meter.rates(10 * kS, p, g);  // long idle: nothing left inside
  EXPECT_EQ(p, 0);
  EXPECT_EQ(g, 0);
}

// The full-batch rate covers only the steps where every request decodes: prefills spread
// over several steps (a 12-token budget, 9-token prompts) and the finishing tail are outside
// it, so with every step taking >= 4 ms it is close to 4 requests / 4 ms and above the
// median-first-token rate, which counts the ragged start and tail.
TEST(EngineBenchmark, FullBatchRateCountsOnlyStepsWhereEveryRequestDecodes) {
  struct SlowFake : FakeModel {
    using FakeModel::FakeModel;
    Status forward(const ForwardBatch& batch, std::span<float> logits) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
      return FakeModel::forward(batch, logits);
    }
  };
  auto engine =
      Engine::create(std::make_unique<SlowFake>(kVocab, 256),
                     {.max_batch = 4, .max_batched_tokens = 12, .block_size = 4, .num_blocks = 64});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto r = run_engine_benchmark(**engine,
                                {.num_requests = 4, .prompt_tokens = 9, .generated_tokens = 24});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const double ceiling = 4 / 4e-3;  // 4 tokens a step, each step at least 4 ms
  EXPECT_LE(r->full_batch_decode_tokens_per_s, ceiling * 1.02);
  EXPECT_GT(r->full_batch_decode_tokens_per_s, ceiling * 0.5);  // loaded CI box
  EXPECT_GT(r->full_batch_decode_tokens_per_s, r->decode_tokens_per_s);
  // One request: the whole decode is its own full batch.
  auto lone = run_engine_benchmark(**engine,
                                   {.num_requests = 1, .prompt_tokens = 9, .generated_tokens = 12});
  ASSERT_TRUE(lone.ok());
  EXPECT_LE(lone->full_batch_decode_tokens_per_s, 1 / 4e-3 * 1.02);
  EXPECT_GT(lone->full_batch_decode_tokens_per_s, 0);
}

TEST(EngineBenchmark, CountsEveryTokenOfEveryRequest) {
  auto engine = make_engine({.max_batch = 4, .block_size = 4, .num_blocks = 64});
  auto result = run_engine_benchmark(
      *engine,
      {.num_requests = 6, .prompt_tokens = 9, .generated_tokens = 5, .shared_prompt = true});
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->num_requests, 6);
  EXPECT_EQ(result->prompt_tokens, 54);
  EXPECT_EQ(result->generated_tokens, 30);
  EXPECT_GT(result->cached_tokens, 0);  // the shared prompt's blocks were reused
  EXPECT_GT(result->output_tokens_per_s, 0);
  EXPECT_LE(result->ttft_ms_median, result->ttft_ms_max);
  EXPECT_FALSE(run_engine_benchmark(*engine, {.num_requests = 0}).ok());
  // Over the KV budget: the submit error comes back.
  EXPECT_FALSE(run_engine_benchmark(*engine, {.num_requests = 1, .prompt_tokens = 300}).ok());
}

}  // namespace
}  // namespace hearth::engine
