// Engine levels: one engine for all levels (the KV pool sized once, from device memory on a
// GPU), levels run one after another on an idle engine, then the cached-prefix test: a
// prefix request fills the prefix cache, and a second request of prefix + suffix is timed
// from submit to its first token.
#include "cli/engine_levels.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "base/clock.h"
#include "engine/benchmark.h"
#include "engine/sampler.h"

namespace hearth::cli {
namespace {

// Waits for one request: its first-token time and its finish.
class OneRequestSink : public engine::RequestSink {
 public:
  void on_tokens(std::span<const int32_t>, std::span<const engine::TokenLogprobs>) override {
    std::lock_guard lock(mutex_);
    if (first_token_ns_ == 0) first_token_ns_ = monotonic_ns();
  }
  void on_finish(const engine::FinishInfo& info) override {
    std::lock_guard lock(mutex_);
    info_ = info;
    finished_ = true;
    done_.notify_all();
  }
  engine::FinishInfo wait(int64_t* first_token_ns) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return finished_; });
    *first_token_ns = first_token_ns_;
    return info_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  int64_t first_token_ns_ = 0;
  engine::FinishInfo info_;
};

// Submits `prompt` for one greedy token; returns milliseconds from submit to that token.
Result<double> time_first_token(engine::Engine& engine, std::vector<int32_t> prompt,
                                int* cached_tokens) {
  engine::SamplingParams params;
  params.temperature = 0;
  params.ignore_eos = true;
  params.max_tokens = 1;
  auto sink = std::make_shared<OneRequestSink>();
  const int64_t start = monotonic_ns();
  HEARTH_RETURN_IF_ERROR(engine.submit(std::move(prompt), params, sink).status());
  int64_t first = 0;
  engine::FinishInfo info = sink->wait(&first);
  if (info.reason != engine::FinishReason::kLength) {
    return info.status.ok() ? internal_error("prefix request finished early ({})",
                                             engine::finish_reason_name(info.reason))
                            : info.status;
  }
  *cached_tokens = info.cached_tokens;
  return static_cast<double>(first - start) * 1e-6;
}

}  // namespace

Result<nlohmann::json> run_engine_levels(std::unique_ptr<Model> model,
                                         const EngineLevelsSpec& spec) {
  if (spec.concurrency.empty()) return invalid_argument_error("--concurrency needs a level");
  for (int c : spec.concurrency) {
    if (c < 1) return invalid_argument_error("--concurrency levels must be >= 1, got {}", c);
  }
  const int max_level = *std::max_element(spec.concurrency.begin(), spec.concurrency.end());
  const int context = model->config().max_position_embeddings;
  if (spec.prefix_tokens > 0 && spec.prefix_tokens + spec.suffix_tokens + 1 > context) {
    return invalid_argument_error("--prefix-tokens {} + {} suffix tokens exceed the context of {}",
                                  spec.prefix_tokens, spec.suffix_tokens, context);
  }
  engine::EngineOptions options;
  options.max_batch = max_level;
  options.max_batched_tokens = spec.max_batched_tokens;
  options.memory_budget_gb = spec.memory_budget_gb;
  options.gpu_memory_utilization = spec.gpu_memory_utilization;
  // Sequences no longer than the benchmark needs, so the pool is not sized for the model's
  // full context times the number of requests.
  options.max_context = std::min(context, std::max(spec.prompt_tokens + spec.tokens,
                                                   spec.prefix_tokens + spec.suffix_tokens + 1));
  HEARTH_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine,
                          engine::Engine::create(std::move(model), options));
  nlohmann::json report;
  report["max_batch"] = max_level;
  report["kv_blocks"] = engine->scheduler_options().num_blocks;
  report["kv_block_size"] = engine->scheduler_options().block_size;
  report["max_batched_tokens"] = engine->scheduler_options().max_batched_tokens;
  nlohmann::json levels = nlohmann::json::array();
  for (int c : spec.concurrency) {
    engine::EngineBenchmarkSpec s;
    s.num_requests = c;
    s.prompt_tokens = spec.prompt_tokens;
    s.generated_tokens = spec.tokens;
    s.seed = static_cast<uint64_t>(c);
    HEARTH_ASSIGN_OR_RETURN(engine::EngineBenchmarkResult r,
                            engine::run_engine_benchmark(*engine, s));
    levels.push_back({{"concurrency", c},
                      {"output_tok_s", r.output_tokens_per_s},
                      {"decode_tok_s", r.decode_tokens_per_s},
                      {"full_batch_decode_tok_s", r.full_batch_decode_tokens_per_s},
                      {"ttft_ms_median", r.ttft_ms_median},
                      {"ttft_ms_max", r.ttft_ms_max},
                      {"wall_s", r.wall_s},
                      {"generated_tokens", r.generated_tokens}});
  }
  report["levels"] = levels;
  if (spec.prefix_tokens > 0) {
    engine::SamplerRng rng(7);
    const int32_t vocab = engine->model().config().vocab_size;
    auto random_tokens = [&](int n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (int32_t& t : v) t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
      return v;
    };
    const std::vector<int32_t> prefix = random_tokens(spec.prefix_tokens);
    auto with_new_suffix = [&] {
      std::vector<int32_t> v = prefix;
      const std::vector<int32_t> suffix = random_tokens(spec.suffix_tokens);
      v.insert(v.end(), suffix.begin(), suffix.end());
      return v;
    };
    int cached = 0;
    HEARTH_ASSIGN_OR_RETURN(double cold_ms, time_first_token(*engine, prefix, &cached));
    HEARTH_ASSIGN_OR_RETURN(double warm_ms, time_first_token(*engine, with_new_suffix(), &cached));
    // Another suffix of the same length over the same cached prefix: the same step shape, now
    // met before (the first request at a new row count also pays for its GEMM plans and, on
    // CUDA, the lazy load of their kernels: dev/cuda/NOTES.md, session 25).
    int cached_again = 0;
    HEARTH_ASSIGN_OR_RETURN(double again_ms,
                            time_first_token(*engine, with_new_suffix(), &cached_again));
    report["prefix"] = {{"prefix_tokens", spec.prefix_tokens},
                        {"suffix_tokens", spec.suffix_tokens},
                        {"cold_ttft_ms", cold_ms},
                        {"suffix_ttft_ms", warm_ms},
                        {"cached_tokens", cached},
                        {"suffix_again_ttft_ms", again_ms},
                        {"again_cached_tokens", cached_again}};
  }
  report["levers"] = engine->model().describe();
  if (auto m = engine->model().device_memory()) {
    report["peak_device_mib"] = static_cast<double>(m->peak_bytes) / (1 << 20);
  }
  engine->shutdown();
  return report;
}

std::string format_engine_levels(const nlohmann::json& report) {
  std::string out =
      fmt::format("engine   batch {}, KV {} blocks x {} tokens, {} tokens/step\n",
                  report["max_batch"].get<int>(), report["kv_blocks"].get<int>(),
                  report["kv_block_size"].get<int>(), report["max_batched_tokens"].get<int>());
  for (const auto& l : report["levels"]) {
    out += fmt::format(
        "c={:<4}   {:.1f} output tok/s ({:.1f} decode tok/s, {:.1f} with the whole batch "
        "decoding), TTFT median {:.1f} ms, max {:.1f} ms\n",
        l["concurrency"].get<int>(), l["output_tok_s"].get<double>(),
        l["decode_tok_s"].get<double>(), l["full_batch_decode_tok_s"].get<double>(),
        l["ttft_ms_median"].get<double>(), l["ttft_ms_max"].get<double>());
  }
  if (report.contains("prefix")) {
    const auto& p = report["prefix"];
    out += fmt::format(
        "prefix   {} tokens: cold TTFT {:.1f} ms; +{} tokens after it cached ({} cached): TTFT "
        "{:.1f} ms, another {} the same way {:.1f} ms\n",
        p["prefix_tokens"].get<int>(), p["cold_ttft_ms"].get<double>(),
        p["suffix_tokens"].get<int>(), p["cached_tokens"].get<int>(),
        p["suffix_ttft_ms"].get<double>(), p["suffix_tokens"].get<int>(),
        p["suffix_again_ttft_ms"].get<double>());
  }
  if (report.contains("peak_device_mib")) {
    out +=
        fmt::format("memory   peak device {:.0f} MiB\n", report["peak_device_mib"].get<double>());
  }
  return out;
}

}  // namespace hearth::cli
