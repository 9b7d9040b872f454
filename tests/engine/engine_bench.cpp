// hearth_engine_bench: the measurements behind two engine choices recorded in
// benchmarks/RESULTS.md — a lone request through the engine vs the bare forward loop that
// `hearth benchmark` times (paired, interleaved runs), and CPU speed per KV block size.
// A measurement tool, not a test: it is built with the tests but CTest does not run it.
#include <fmt/format.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <random>

#include "base/clock.h"
#include "engine/benchmark.h"
#include "engine/engine.h"
#include "fake_model.h"
#include "models/model.h"

namespace hearth::engine {
namespace {

struct Args {
  std::string model;
  int threads = 0;
  int prompt_tokens = 128;
  int tokens = 64;
  int runs = 5;
  std::vector<int> block_sizes = {8, 16, 32, 64};
  int batch = 8;  // requests of the batched block-size run
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of the whole process (every thread): unlike wall time, it barely moves when other
// processes take the cores, so paired CPU figures stay comparable on a busy machine.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Forwards to the real model and adds up the wall time spent inside forward(), so that the
// engine's own per-step cost (scheduling, sampling, sinks, hand-offs) is what remains.
class TimedModel : public Model {
 public:
  explicit TimedModel(std::unique_ptr<Model> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  Status create_kv_cache(int num_blocks, int block_size) override {
    return inner_->create_kv_cache(num_blocks, block_size);
  }
  int kv_num_blocks() const override { return inner_->kv_num_blocks(); }
  int kv_block_size() const override { return inner_->kv_block_size(); }
  size_t kv_bytes_per_block(int block_size) const override {
    return inner_->kv_bytes_per_block(block_size);
  }
  Status copy_kv_block(int src, int dst) override { return inner_->copy_kv_block(src, dst); }
  Status forward(const ForwardBatch& batch, std::span<float> logits) override {
    int64_t t0 = monotonic_ns();
    if (last_end_ns > 0) gaps_ns.push_back(t0 - last_end_ns);
    double c0 = cpu_seconds();
    Status s = inner_->forward(batch, logits);
    last_end_ns = monotonic_ns();
    forward_ns += last_end_ns - t0;
    if (batch.tokens.size() > 1) prefill_cpu_s += cpu_seconds() - c0;
    ++forward_calls;
    return s;
  }
  size_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string describe() const override { return inner_->describe(); }

  Model& inner() { return *inner_; }
  int64_t forward_ns = 0;  // written on the engine thread, read after the engine is idle
  int64_t forward_calls = 0;
  double prefill_cpu_s = 0;  // process CPU time inside multi-token forwards
  int64_t last_end_ns = 0;
  std::vector<int64_t> gaps_ns;  // between the end of one forward and the next one's start

 private:
  std::unique_ptr<Model> inner_;
};

Result<std::unique_ptr<Model>> load(const Args& args) {
  return load_model(args.model, LoadOptions{args.threads, KernelKind::kCpu});
}

// The loop `hearth benchmark` times: one prefill forward, then one forward per token with
// greedy argmax, on a private block table. Returns decode {wall, CPU} seconds per token.
struct PerToken {
  double wall_s = 0;
  double cpu_s = 0;
};
Result<PerToken> bare_decode(Model& model, const Args& args, int block_size, uint64_t seed) {
  const int vocab = model.config().vocab_size;
  const int total = args.prompt_tokens + args.tokens;
  const int blocks = (total + block_size - 1) / block_size;
  HEARTH_RETURN_IF_ERROR(model.create_kv_cache(blocks, block_size));
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> prompt(static_cast<size_t>(args.prompt_tokens));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  std::vector<int32_t> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<size_t>(vocab));
  SequenceSlice seq{0, args.prompt_tokens, 0, table};
  int32_t last = args.prompt_tokens - 1;
  HEARTH_RETURN_IF_ERROR(model.forward({prompt, positions, {&seq, 1}, {&last, 1}}, logits));
  int32_t token =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  Stopwatch watch;
  double c0 = cpu_seconds();
  for (int i = 0; i < args.tokens; ++i) {
    int32_t pos = args.prompt_tokens + i;
    SequenceSlice s{0, 1, pos, table};
    int32_t row = 0;
    HEARTH_RETURN_IF_ERROR(model.forward({{&token, 1}, {&pos, 1}, {&s, 1}, {&row, 1}}, logits));
    token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return PerToken{watch.elapsed_seconds() / args.tokens, (cpu_seconds() - c0) / args.tokens};
}

// Lone request: engine decode seconds per token vs the bare loop, interleaved run by run.
int compare_lone(const Args& args) {
  auto bare_model = load(args);
  auto engine_model = load(args);
  if (!bare_model.ok() || !engine_model.ok()) {
    fmt::print(stderr, "{}\n",
               (bare_model.ok() ? engine_model.status() : bare_model.status()).to_string());
    return 1;
  }
  fmt::print("levers {}\n", (*bare_model)->describe());
  auto timed = std::make_unique<TimedModel>(std::move(*engine_model));
  TimedModel* timed_raw = timed.get();
  auto engine = Engine::create(std::move(timed), {.max_batch = 1, .block_size = 16});
  if (!engine.ok()) {
    fmt::print(stderr, "{}\n", engine.status().to_string());
    return 1;
  }
  EngineBenchmarkSpec spec{.num_requests = 1,
                           .prompt_tokens = args.prompt_tokens,
                           .generated_tokens = args.tokens + 1};  // +1: the prefill's token
  std::vector<double> bare_s, engine_s, ratio, overhead_us, forward_s, cpu_ratio;
  for (int run = -1; run < args.runs; ++run) {  // run -1 warms both up
    auto b = bare_decode(**bare_model, args, 16, static_cast<uint64_t>(run + 2));
    int64_t f0 = timed_raw->forward_ns, c0 = timed_raw->forward_calls;
    double p0 = timed_raw->prefill_cpu_s, cpu0 = cpu_seconds();
    spec.seed = static_cast<uint64_t>(run + 2);
    auto e = run_engine_benchmark(**engine, spec);
    double engine_cpu = (cpu_seconds() - cpu0 - (timed_raw->prefill_cpu_s - p0)) / args.tokens;
    if (!b.ok() || !e.ok()) {
      fmt::print(stderr, "{}\n", (b.ok() ? e.status() : b.status()).to_string());
      return 1;
    }
    if (run < 0) continue;
    // Engine: decode_tokens_per_s covers the tokens after the first, i.e. args.tokens forwards.
    double per_token = 1.0 / e->decode_tokens_per_s;
    double fwd = static_cast<double>(timed_raw->forward_ns - f0) * 1e-9;
    int64_t calls = timed_raw->forward_calls - c0;
    bare_s.push_back(b->wall_s);
    engine_s.push_back(per_token);
    ratio.push_back(per_token / b->wall_s);
    cpu_ratio.push_back(engine_cpu / b->cpu_s);
    forward_s.push_back(fwd / static_cast<double>(calls));
    overhead_us.push_back((e->wall_s - fwd) / static_cast<double>(calls) * 1e6);
    fmt::print(
        "run {}: bare {:.2f} tok/s, engine {:.2f} tok/s (engine/bare wall {:.3f}, CPU "
        "{:.2f} vs {:.2f} ms/token = {:.3f}), engine outside forward {:.1f} us/step\n",
        run + 1, 1.0 / b->wall_s, 1.0 / per_token, per_token / b->wall_s, engine_cpu * 1e3,
        b->cpu_s * 1e3, cpu_ratio.back(), overhead_us.back());
  }
  fmt::print(
      "median: bare {:.2f} tok/s, engine {:.2f} tok/s, engine/bare wall ratio {:.3f}, "
      "CPU-time ratio {:.3f} (medians of per-run ratios), outside forward {:.1f} us/step, "
      "forward {:.2f} ms\n",
      1.0 / median(bare_s), 1.0 / median(engine_s), median(ratio), median(cpu_ratio),
      median(overhead_us), median(forward_s) * 1e3);
  return 0;
}

// Block sizes: prefill and decode of a lone request with a long prompt (attention reads
// the whole paged context every token), and aggregate decode of `batch` short requests,
// through the engine with each block size; sizes interleaved within every run.
int compare_block_sizes(const Args& args) {
  struct Row {
    std::vector<double> prefill, decode, batched, cpu_ms;
  };
  std::vector<Row> rows(args.block_sizes.size());
  std::vector<std::unique_ptr<Engine>> engines;
  for (int bs : args.block_sizes) {
    auto model = load(args);
    if (!model.ok()) {
      fmt::print(stderr, "{}\n", model.status().to_string());
      return 1;
    }
    if (engines.empty()) fmt::print("levers {}\n", (*model)->describe());
    auto engine = Engine::create(std::move(*model),
                                 {.max_batch = args.batch, .block_size = bs, .prompt_cache_gb = 0});
    if (!engine.ok()) {
      fmt::print(stderr, "{}\n", engine.status().to_string());
      return 1;
    }
    engines.push_back(std::move(*engine));
  }
  for (int run = -1; run < args.runs; ++run) {
    for (size_t i = 0; i < engines.size(); ++i) {
      const auto seed = static_cast<uint64_t>(run + 2);
      EngineBenchmarkSpec lone{.num_requests = 1,
                               .prompt_tokens = args.prompt_tokens,
                               .generated_tokens = args.tokens + 1,
                               .seed = seed};
      double c0 = cpu_seconds();
      auto a = run_engine_benchmark(*engines[i], lone);
      double c1 = cpu_seconds();
      EngineBenchmarkSpec many{.num_requests = args.batch,
                               .prompt_tokens = 16,
                               .generated_tokens = args.tokens + 1,
                               .seed = seed};
      auto m = run_engine_benchmark(*engines[i], many);
      if (!a.ok() || !m.ok()) {
        fmt::print(stderr, "{}\n", (a.ok() ? m.status() : a.status()).to_string());
        return 1;
      }
      if (run < 0) continue;
      rows[i].prefill.push_back(args.prompt_tokens / (a->ttft_ms_median * 1e-3));
      rows[i].decode.push_back(a->decode_tokens_per_s);
      rows[i].batched.push_back(m->decode_tokens_per_s);
      rows[i].cpu_ms.push_back((c1 - c0) * 1e3);
    }
  }
  fmt::print(
      "| block size | prefill tok/s (pp{}) | decode tok/s (tg{} after pp{}) | {} x (pp16, "
      "tg{}) aggregate decode tok/s | CPU s of the lone run |\n|---|---|---|---|---|\n",
      args.prompt_tokens, args.tokens, args.prompt_tokens, args.batch, args.tokens);
  for (size_t i = 0; i < rows.size(); ++i) {
    fmt::print("| {} | {:.1f} | {:.2f} | {:.2f} | {:.2f} |\n", args.block_sizes[i],
               median(rows[i].prefill), median(rows[i].decode), median(rows[i].batched),
               median(rows[i].cpu_ms) * 1e-3);
  }
  return 0;
}

// Where a step's time goes with `batch` concurrent short requests: inside forward() vs the
// engine's own work (scheduling, sampling every row, sinks).
int step_overhead(const Args& args) {
  auto model = load(args);
  if (!model.ok()) {
    fmt::print(stderr, "{}\n", model.status().to_string());
    return 1;
  }
  auto timed = std::make_unique<TimedModel>(std::move(*model));
  TimedModel* timed_raw = timed.get();
  auto engine = Engine::create(std::move(timed), {.max_batch = args.batch, .block_size = 16});
  if (!engine.ok()) {
    fmt::print(stderr, "{}\n", engine.status().to_string());
    return 1;
  }
  for (int run = -1; run < args.runs; ++run) {
    int64_t f0 = timed_raw->forward_ns, c0 = timed_raw->forward_calls;
    auto r = run_engine_benchmark(**engine, {.num_requests = args.batch,
                                             .prompt_tokens = args.prompt_tokens,
                                             .generated_tokens = args.tokens + 1,
                                             .seed = static_cast<uint64_t>(run + 2)});
    if (!r.ok()) {
      fmt::print(stderr, "{}\n", r.status().to_string());
      return 1;
    }
    std::vector<int64_t> gaps = std::move(timed_raw->gaps_ns);
    timed_raw->gaps_ns.clear();
    timed_raw->last_end_ns = 0;
    if (run < 0) continue;
    double fwd = static_cast<double>(timed_raw->forward_ns - f0) * 1e-9;
    double calls = static_cast<double>(timed_raw->forward_calls - c0);
    std::sort(gaps.begin(), gaps.end());
    if (!gaps.empty()) {
      fmt::print("  gaps between forwards: median {:.1f} us, max {:.1f} us\n",
                 static_cast<double>(gaps[gaps.size() / 2]) * 1e-3,
                 static_cast<double>(gaps.back()) * 1e-3);
    }
    fmt::print(
        "run {}: {} requests, {:.1f} tok/s aggregate decode, {:.0f} steps, forward "
        "{:.1f} us/step, engine outside forward {:.1f} us/step\n",
        run + 1, args.batch, r->decode_tokens_per_s, calls, fwd / calls * 1e6,
        (r->wall_s - fwd) / calls * 1e6);
  }
  return 0;
}

// Records when the first token arrived and lets the caller wait for the finish.
class FirstTokenSink : public RequestSink {
 public:
  void on_tokens(std::span<const int32_t>, std::span<const TokenLogprobs>) override {
    std::lock_guard lock(mutex_);
    if (first_ns_ == 0) first_ns_ = monotonic_ns();
  }
  void on_finish(const FinishInfo&) override {
    std::lock_guard lock(mutex_);
    done_ = true;
    cv_.notify_all();
  }
  int64_t wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    return first_ns_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  int64_t first_ns_ = 0;
};

// The engine's host path of a cached-prefix request: a prefix of --prompt-tokens random
// tokens is computed once, then prefix + 16 tokens is submitted and timed from submit to
// its first token. The model is the test FakeModel (vocab 128256, no weights), so what is
// left after the time inside forward() is hashing, prefix lookup, admission, scheduling,
// the host argmax over the vocabulary and the hand-offs between threads.
int prefix_host(const Args& args) {
  constexpr int32_t kVocab = 128256;
  constexpr int kSuffix = 16;
  const int context = args.prompt_tokens + kSuffix + 1;
  auto timed = std::make_unique<TimedModel>(std::make_unique<testing::FakeModel>(kVocab, context));
  TimedModel* timed_raw = timed.get();
  const int blocks = 4 * ((context + 15) / 16);
  auto engine =
      Engine::create(std::move(timed), {.max_batch = 8, .block_size = 16, .num_blocks = blocks});
  if (!engine.ok()) {
    fmt::print(stderr, "{}\n", engine.status().to_string());
    return 1;
  }
  std::mt19937_64 rng(1);
  std::vector<double> host_ms, forward_ms, ttft_ms;
  for (int run = -1; run < args.runs; ++run) {
    std::vector<int32_t> prefix(static_cast<size_t>(args.prompt_tokens));
    for (int32_t& t : prefix) t = static_cast<int32_t>(rng() % kVocab);
    auto first_token_ms = [&](std::vector<int32_t> prompt, double* forward) -> Result<double> {
      auto sink = std::make_shared<FirstTokenSink>();
      SamplingParams params;
      params.temperature = 0;
      params.ignore_eos = true;
      params.max_tokens = 1;
      const int64_t f0 = timed_raw->forward_ns;
      const int64_t t0 = monotonic_ns();
      HEARTH_RETURN_IF_ERROR((*engine)->submit(std::move(prompt), params, sink).status());
      const int64_t first = sink->wait();
      *forward = static_cast<double>(timed_raw->forward_ns - f0) * 1e-6;
      return static_cast<double>(first - t0) * 1e-6;
    };
    double cold_forward = 0, warm_forward = 0;
    auto cold = first_token_ms(prefix, &cold_forward);
    std::vector<int32_t> with_suffix = prefix;
    for (int i = 0; i < kSuffix; ++i) with_suffix.push_back(static_cast<int32_t>(rng() % kVocab));
    auto warm = first_token_ms(with_suffix, &warm_forward);
    if (!cold.ok() || !warm.ok()) {
      fmt::print(stderr, "{}\n", (cold.ok() ? warm.status() : cold.status()).to_string());
      return 1;
    }
    if (run < 0) continue;
    ttft_ms.push_back(*warm);
    forward_ms.push_back(warm_forward);
    host_ms.push_back(*warm - warm_forward);
  }
  fmt::print(
      "prefix {} + {} tokens (cached {} blocks of 16), {} runs: TTFT median {:.3f} ms, inside "
      "forward {:.3f} ms, engine host path {:.3f} ms (max {:.3f})\n",
      args.prompt_tokens, kSuffix, args.prompt_tokens / 16, args.runs, median(ttft_ms),
      median(forward_ms), median(host_ms), *std::max_element(host_ms.begin(), host_ms.end()));
  return 0;
}

}  // namespace
}  // namespace hearth::engine

int main(int argc, char** argv) {
  hearth::engine::Args args;
  std::string mode = "lone";
  CLI::App app("hearth engine measurements");
  app.add_option("mode", mode, "lone | block-sizes | overhead | prefix-host")->required();
  app.add_option("model", args.model, "Model directory (not for prefix-host)");
  app.add_option("--threads", args.threads, "CPU threads (0: all)");
  app.add_option("--prompt-tokens", args.prompt_tokens, "Prompt length");
  app.add_option("--tokens", args.tokens, "Decoded tokens per run");
  app.add_option("--runs", args.runs, "Timed runs");
  app.add_option("--block-sizes", args.block_sizes, "Block sizes to compare");
  app.add_option("--batch", args.batch, "Requests of the batched run");
  CLI11_PARSE(app, argc, argv);
  if (mode == "lone") return hearth::engine::compare_lone(args);
  if (mode == "block-sizes") return hearth::engine::compare_block_sizes(args);
  if (mode == "overhead") return hearth::engine::step_overhead(args);
  if (mode == "prefix-host") return hearth::engine::prefix_host(args);
  fmt::print(stderr, "unknown mode {}\n", mode);
  return 2;
}
