// Scheduler tests with the fake model: hand-built cases for chunked prefill, prefix hits,
// preemption, FIFO and cancellation, then seeded random schedules of arrive / cancel /
// finish / preempt checking the block invariants after every step, every output against the
// fake model's reference continuation, and that every request finishes.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "engine/sampler.h"
#include "fake_model.h"
#include "recording_sink.h"

namespace hearth::engine {
namespace {

using testing::fake_greedy;
using testing::FakeModel;
using testing::RecordingSink;

constexpr int32_t kVocab = 64;

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

struct Harness {
  explicit Harness(SchedulerOptions options, std::vector<int32_t> eos = {})
      : model(kVocab, options.max_context, eos) {
    options.vocab_size = kVocab;
    options.eos_ids = eos;
    EXPECT_TRUE(model.create_kv_cache(options.num_blocks, options.block_size).ok());
    scheduler = std::make_unique<Scheduler>(options);
  }

  std::shared_ptr<RecordingSink> add(std::vector<int32_t> prompt, SamplingParams params) {
    auto sink = std::make_shared<RecordingSink>();
    EXPECT_TRUE(scheduler->check_admissible(prompt, params).ok());
    scheduler->add(std::make_unique<Request>(next_id++, std::move(prompt), params, sink));
    return sink;
  }

  void step() {
    Status status = scheduler->step(model);
    EXPECT_TRUE(status.ok()) << status.to_string();
    scheduler->check_invariants();
  }

  int drain(int max_steps = 100000) {
    int steps = 0;
    while (scheduler->has_work() && steps < max_steps) {
      step();
      ++steps;
    }
    EXPECT_FALSE(scheduler->has_work()) << "requests starved";
    return steps;
  }

  FakeModel model;
  std::unique_ptr<Scheduler> scheduler;
  RequestId next_id = 1;
};

std::vector<int32_t> tokens_from(int n, int32_t start) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((start + i * 7) % kVocab);
  return t;
}

TEST(Scheduler, LoneRequestMatchesReferenceAndFreesItsBlocks) {
  Harness h({.block_size = 4, .num_blocks = 16, .max_context = 128});
  std::vector<int32_t> prompt = tokens_from(10, 3);
  auto sink = h.add(prompt, greedy(12));
  h.drain();
  EXPECT_EQ(sink->tokens(), fake_greedy(prompt, 12, kVocab));
  ASSERT_TRUE(sink->finish());
  EXPECT_EQ(sink->finish()->reason, FinishReason::kLength);
  EXPECT_EQ(sink->finish()->completion_tokens, 12);
  EXPECT_EQ(sink->finish_calls(), 1);
  EngineStats s = h.scheduler->stats();
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.generation_tokens_total, 12);
  EXPECT_EQ(s.prompt_tokens_total, 10);
}

TEST(Scheduler, ChunkedPrefillRespectsTheTokenBudget) {
  Harness h({.max_batched_tokens = 5, .block_size = 4, .num_blocks = 32, .max_context = 128});
  std::vector<int32_t> prompt = tokens_from(23, 1);
  auto sink = h.add(prompt, greedy(3));
  h.step();  // 5 prompt tokens, no logits yet
  EXPECT_TRUE(sink->tokens().empty());
  h.drain();
  EXPECT_EQ(sink->tokens(), fake_greedy(prompt, 3, kVocab));
  EXPECT_LE(h.model.max_batch_tokens, 5u);
}

TEST(Scheduler, DecodeRowsAndPrefillChunksShareAStep) {
  Harness h({.max_batched_tokens = 8, .block_size = 4, .num_blocks = 64, .max_context = 128});
  auto a = h.add(tokens_from(3, 0), greedy(20));
  h.step();  // a prefilled, first token sampled
  EXPECT_EQ(a->tokens().size(), 1u);
  auto b = h.add(tokens_from(30, 5), greedy(2));
  h.step();  // a decodes 1 token + b prefills a 7-token chunk in the same forward
  EXPECT_EQ(a->tokens().size(), 2u);
  EXPECT_EQ(h.model.max_batch_tokens, 8u);
  h.drain();
  EXPECT_EQ(a->tokens(), fake_greedy(tokens_from(3, 0), 20, kVocab));
  EXPECT_EQ(b->tokens(), fake_greedy(tokens_from(30, 5), 2, kVocab));
}

TEST(Scheduler, EosStopsUnlessIgnored) {
  std::vector<int32_t> prompt = tokens_from(5, 2);
  std::vector<int32_t> ref = fake_greedy(prompt, 6, kVocab);
  int32_t eos = ref[3];  // the 4th generated token acts as EOS
  std::vector<int32_t> want = fake_greedy(prompt, 6, kVocab, {eos});
  Harness h({.block_size = 4, .num_blocks = 16, .max_context = 128}, {eos});
  auto stopped = h.add(prompt, greedy(6));
  SamplingParams ignore = greedy(6);
  ignore.ignore_eos = true;
  auto ignored = h.add(prompt, ignore);
  SamplingParams stop_ids = greedy(6);
  stop_ids.ignore_eos = true;
  stop_ids.stop_token_ids = {ref[1]};
  auto by_stop_id = h.add(prompt, stop_ids);
  h.drain();
  ASSERT_TRUE(stopped->finish());
  EXPECT_EQ(stopped->finish()->reason, FinishReason::kStop);
  EXPECT_EQ(stopped->finish()->stop_token, eos);
  // The stop token is reported in FinishInfo, not streamed.
  EXPECT_EQ(stopped->tokens(), std::vector<int32_t>(want.begin(), want.end() - 1));
  EXPECT_EQ(stopped->finish()->completion_tokens, static_cast<int>(want.size()));
  EXPECT_EQ(ignored->tokens(), ref);
  EXPECT_EQ(ignored->finish()->reason, FinishReason::kLength);
  EXPECT_EQ(by_stop_id->tokens(), std::vector<int32_t>{ref[0]});
  EXPECT_EQ(by_stop_id->finish()->stop_token, ref[1]);
}

TEST(Scheduler, PrefixHitSharesBlocksAndKeepsOutputIdentical) {
  Harness h({.block_size = 4, .num_blocks = 32, .max_context = 128});
  std::vector<int32_t> prompt = tokens_from(18, 9);
  auto first = h.add(prompt, greedy(5));
  h.drain();
  EXPECT_EQ(first->finish()->cached_tokens, 0);
  auto again = h.add(prompt, greedy(5));
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {1, 2, 3, 4, 5, 6});
  auto extended = h.add(longer, greedy(5));
  h.drain();
  EXPECT_EQ(again->tokens(), first->tokens());
  EXPECT_EQ(again->finish()->cached_tokens, 16);  // 4 full blocks; the rest recomputed
  // The first request's 18 prompt + 4 computed output tokens = 5 full blocks, but the
  // longer prompt diverges at token 18.
  EXPECT_EQ(extended->finish()->cached_tokens, 16);
  EXPECT_EQ(extended->tokens(), fake_greedy(longer, 5, kVocab));
  EngineStats s = h.scheduler->stats();
  EXPECT_EQ(s.prefix_hit_tokens, 32);
  EXPECT_EQ(s.prefix_query_tokens, 18 + 18 + 24);
  EXPECT_GT(s.blocks_idle, 0);
  EXPECT_EQ(s.blocks_used, 0);
}

TEST(Scheduler, DisabledPromptCacheNeverHits) {
  Harness h({.block_size = 4, .num_blocks = 32, .max_idle_cached_blocks = 0, .max_context = 128});
  std::vector<int32_t> prompt = tokens_from(18, 9);
  h.add(prompt, greedy(2));
  h.drain();
  auto again = h.add(prompt, greedy(2));
  h.drain();
  EXPECT_EQ(again->finish()->cached_tokens, 0);
  EXPECT_EQ(h.scheduler->stats().blocks_cached, 0);
}

TEST(Scheduler, BatchOneIsStrictSerialFifo) {
  Harness h({.max_running = 1, .block_size = 4, .num_blocks = 64, .max_context = 128});
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 5; ++i) sinks.push_back(h.add(tokens_from(3 + i * 5, i), greedy(4)));
  std::vector<int> finish_order;
  while (h.scheduler->has_work()) {
    h.step();
    EXPECT_LE(h.scheduler->running_ids().size(), 1u);
    for (int i = 0; i < 5; ++i) {
      if (sinks[i]->finish() &&
          std::find(finish_order.begin(), finish_order.end(), i) == finish_order.end()) {
        finish_order.push_back(i);
      }
    }
  }
  EXPECT_EQ(finish_order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Scheduler, NewestRunningRequestIsPreemptedAndRecomputed) {
  // 6 blocks of 4 tokens: two requests growing to 4 blocks each cannot both fit.
  Harness h({.block_size = 4, .num_blocks = 6, .max_context = 128});
  std::vector<int32_t> pa = tokens_from(6, 1), pb = tokens_from(6, 30);
  auto a = h.add(pa, greedy(10));
  auto b = h.add(pb, greedy(10));
  h.drain();
  EXPECT_GT(h.scheduler->stats().preemptions, 0);
  EXPECT_EQ(a->tokens(), fake_greedy(pa, 10, kVocab));
  EXPECT_EQ(b->tokens(), fake_greedy(pb, 10, kVocab));
  EXPECT_EQ(h.scheduler->stats().blocks_used, 0);
}

TEST(Scheduler, AdmissionRejectsWhatCanNeverFit) {
  Harness h({.block_size = 4, .num_blocks = 4, .max_context = 20});
  SamplingParams p = greedy(10);
  Status over_context = h.scheduler->check_admissible(tokens_from(11, 0), p);
  EXPECT_EQ(over_context.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(over_context.message().find("exceeds the model's context of 20"), std::string::npos);
  // 16 KV slots: 7 + 10 - 1 = 16 fits, 8 + 10 - 1 does not.
  EXPECT_TRUE(h.scheduler->check_admissible(tokens_from(7, 0), p).ok());
  Status over_kv = h.scheduler->check_admissible(tokens_from(8, 0), p);
  EXPECT_EQ(over_kv.code(), ErrorCode::kOutOfRange);
  EXPECT_NE(over_kv.message().find("--kv-budget"), std::string::npos);
  EXPECT_FALSE(h.scheduler->check_admissible({}, p).ok());
  EXPECT_FALSE(h.scheduler->check_admissible(std::vector<int32_t>{kVocab}, p).ok());
  p.top_p = 0;
  EXPECT_FALSE(h.scheduler->check_admissible(tokens_from(3, 0), p).ok());
}

TEST(Scheduler, CancelFreesBlocksAtTheNextStep) {
  Harness h({.block_size = 4, .num_blocks = 16, .max_context = 128});
  auto running = h.add(tokens_from(9, 0), greedy(50));
  h.step();
  EXPECT_GT(h.scheduler->stats().blocks_used, 0);
  auto queued = h.add(tokens_from(9, 4), greedy(50));
  h.scheduler->cancel(1);
  h.scheduler->cancel(2);
  h.step();
  EXPECT_EQ(h.scheduler->stats().blocks_used, 0);
  EXPECT_FALSE(h.scheduler->has_work());
  EXPECT_EQ(running->finish()->reason, FinishReason::kCancelled);
  EXPECT_EQ(queued->finish()->reason, FinishReason::kCancelled);
  EXPECT_EQ(running->tokens().size(), 1u);
}

TEST(Scheduler, ForwardErrorFailsTheBatchAndFreesBlocks) {
  Harness h({.block_size = 4, .num_blocks = 16, .max_context = 128});
  auto sink = h.add(tokens_from(5, 0), greedy(5));
  h.model.fail_next = true;
  EXPECT_FALSE(h.scheduler->step(h.model).ok());
  h.scheduler->check_invariants();
  ASSERT_TRUE(sink->finish());
  EXPECT_EQ(sink->finish()->reason, FinishReason::kError);
  EXPECT_NE(sink->finish()->status.message().find("injected"), std::string::npos);
  EXPECT_EQ(h.scheduler->stats().blocks_used, 0);
}

TEST(Scheduler, SeededSamplingIsIndependentOfBatchCompany) {
  // Random-but-seeded requests give the same tokens alone and with company.
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 77;
  p.max_tokens = 8;
  std::vector<int32_t> prompt = tokens_from(6, 3);
  Harness alone({.block_size = 4, .num_blocks = 64, .max_context = 128});
  auto solo = alone.add(prompt, p);
  alone.drain();
  Harness crowd({.block_size = 4, .num_blocks = 64, .max_context = 128});
  crowd.add(tokens_from(11, 1), greedy(5));
  auto mixed = crowd.add(prompt, p);
  SamplingParams other = p;
  other.seed = 5;
  crowd.add(tokens_from(4, 2), other);
  crowd.drain();
  EXPECT_EQ(mixed->tokens(), solo->tokens());
}

// Random schedules: arrivals (some sharing prefixes), cancellations, tiny pools forcing
// preemption, tiny budgets forcing chunking, EOS finishes. After every step the block
// invariants hold; at the end every request finished exactly once with the reference
// tokens (a prefix of them if cancelled) and no block is held.
struct ScheduleTotals {
  int64_t preemptions = 0, hits = 0, cancels = 0;
};

// Adds to `totals` (out-parameter: ASSERTs need a void function).
void run_random_schedules(uint64_t first_seed, uint64_t last_seed, int hash_bits,
                          ScheduleTotals& totals) {
  int64_t& total_preemptions = totals.preemptions;
  int64_t& total_hits = totals.hits;
  int64_t& total_cancels = totals.cancels;
  for (uint64_t seed = first_seed; seed <= last_seed; ++seed) {
    SamplerRng rng(seed);
    auto uniform = [&](int lo, int hi) {  // inclusive
      return lo + static_cast<int>(rng.next_u64() % static_cast<uint64_t>(hi - lo + 1));
    };
    SchedulerOptions options;
    options.block_size = std::vector<int>{1, 2, 4, 8}[uniform(0, 3)];
    options.num_blocks = uniform(48, 120) / options.block_size + 2;
    options.max_running = uniform(1, 6);
    options.max_batched_tokens = uniform(options.max_running, 40);
    options.max_idle_cached_blocks = std::vector<int64_t>{-1, 0, 3}[uniform(0, 2)];
    options.max_context = 64;
    options.prefix_hash_bits = hash_bits;
    std::vector<int32_t> eos;
    if (uniform(0, 1)) eos = {0};
    Harness h(options, eos);

    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) prefixes.push_back(tokens_from(uniform(4, 20), uniform(0, 63)));
    struct Submitted {
      std::vector<int32_t> prompt;
      int max_tokens;
      std::shared_ptr<RecordingSink> sink;
      bool cancelled = false;
    };
    std::map<RequestId, Submitted> submitted;
    for (int t = 0; t < 400; ++t) {
      if (uniform(0, 99) < 25 && t < 300) {
        std::vector<int32_t> prompt = prefixes[uniform(0, 2)];
        std::vector<int32_t> suffix = tokens_from(uniform(1, 12), uniform(0, 63));
        prompt.insert(prompt.end(), suffix.begin(), suffix.end());
        SamplingParams p = greedy(uniform(1, 24));
        if (!h.scheduler->check_admissible(prompt, p).ok()) {
          int kv_tokens = static_cast<int>(prompt.size()) + p.max_tokens - 1;
          EXPECT_TRUE(kv_tokens > options.num_blocks * options.block_size ||
                      kv_tokens + 1 > options.max_context);
          continue;
        }
        RequestId id = h.next_id;
        submitted[id] = {prompt, p.max_tokens, h.add(prompt, p)};
      }
      if (uniform(0, 99) < 4 && !submitted.empty()) {
        auto it = submitted.begin();
        std::advance(it, uniform(0, static_cast<int>(submitted.size()) - 1));
        h.scheduler->cancel(it->first);
        it->second.cancelled = true;
      }
      h.step();
    }
    h.drain();
    for (auto& [id, s] : submitted) {
      ASSERT_EQ(s.sink->finish_calls(), 1) << "seed " << seed << " request " << id;
      EXPECT_EQ(s.sink->calls_after_finish(), 0);
      FinishInfo info = *s.sink->finish();
      std::vector<int32_t> want = fake_greedy(s.prompt, s.max_tokens, kVocab, eos);
      std::vector<int32_t> got = s.sink->tokens();
      if (info.reason == FinishReason::kCancelled) {
        EXPECT_TRUE(s.cancelled);
        ASSERT_LE(got.size(), want.size());
        EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "seed " << seed;
        ++total_cancels;
        continue;
      }
      if (info.reason == FinishReason::kStop) {
        EXPECT_EQ(info.stop_token, want.back());
        want.pop_back();
      } else {
        EXPECT_EQ(info.reason, FinishReason::kLength);
      }
      EXPECT_EQ(got, want) << "seed " << seed << " request " << id;
    }
    EngineStats stats = h.scheduler->stats();
    EXPECT_EQ(stats.blocks_used, 0) << "seed " << seed;
    EXPECT_EQ(stats.blocks_free + stats.blocks_idle, stats.blocks_total);
    total_preemptions += stats.preemptions;
    total_hits += stats.prefix_hit_tokens;
  }
}

TEST(SchedulerProperty, RandomSchedulesNeverLeakCorruptOrStarve) {
  ScheduleTotals totals;
  run_random_schedules(1, 60, 64, totals);
  // The schedules did exercise what they are meant to.
  EXPECT_GT(totals.preemptions, 0);
  EXPECT_GT(totals.hits, 0);
  EXPECT_GT(totals.cancels, 0);
}

// The same schedules with prefix-cache names cut to 2 bits or 0 bits: nearly every or every
// lookup meets a colliding entry. The fake model reads tokens back from KV, so a hit on a
// block of other tokens would show as a wrong output; hits on identical prefixes survive.
TEST(SchedulerProperty, ForcedHashCollisionsNeverServeWrongKv) {
  ScheduleTotals two_bits, zero_bits;
  run_random_schedules(101, 130, 2, two_bits);
  EXPECT_GT(two_bits.hits, 0);
  run_random_schedules(201, 230, 0, zero_bits);
  EXPECT_GT(zero_bits.hits, 0);  // the single cached first block still serves its own prefix
  EXPECT_GT(two_bits.preemptions + zero_bits.preemptions, 0);
}

}  // namespace
}  // namespace hearth::engine
