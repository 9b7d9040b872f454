// `hearth benchmark <model-dir>`: prefill and decode speed of the forward (CPU or CUDA) on
// random prompt tokens: prefill tok/s, time to first token, decode tok/s (median of runs and
// each run), peak memory and the levers in effect; with --concurrency, engine throughput.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "base/clock.h"
#include "cli/device_flags.h"
#include "cli/engine_levels.h"
#include "cli/verb.h"
#include "models/model.h"
#include "server/bench_client.h"

namespace hearth::cli {
namespace {

struct BenchmarkArgs {
  std::string model;
  int prompt_tokens = 128;
  int tokens = 32;
  int runs = 3;
  int threads = 0;
  bool json = false;
  DeviceArgs device;
  std::vector<int> concurrency;  // engine levels; empty = none
  int prefix_tokens = 0;
  int max_batched_tokens = 0;
  double gpu_memory_utilization = 0;
  // Serving benchmark: drive a running server's API instead of loading a model.
  std::string url;
  int requests = 0;
  std::string api_key;
};

struct RunResult {
  double prefill_s = 0;
  double ttft_s = 0;
  double decode_s = 0;
};

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

Result<RunResult> run_once(Model& model, const BenchmarkArgs& args, uint64_t seed) {
  const int vocab = model.config().vocab_size;
  const int block_size = 16;
  const int total = args.prompt_tokens + args.tokens;
  const int blocks = (total + block_size - 1) / block_size;
  HEARTH_RETURN_IF_ERROR(model.create_kv_cache(blocks, block_size));
  std::vector<int32_t> table(static_cast<std::size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> prompt(static_cast<std::size_t>(args.prompt_tokens));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  std::vector<int32_t> positions(prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<std::size_t>(vocab));

  // Greedy next token: sampled on the device when the model can (only the id crosses to
  // the host, as in the engine), else argmax over the host logits.
  RowSampling greedy;
  auto next_token = [&](const ForwardBatch& batch) -> Result<int32_t> {
    if (model.samples_on_device()) {
      int32_t id = 0;
      HEARTH_RETURN_IF_ERROR(model.forward_sample(batch, {&greedy, 1}, {&id, 1}, {}));
      return id;
    }
    HEARTH_RETURN_IF_ERROR(model.forward(batch, logits));
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };

  RunResult r;
  Stopwatch watch;
  SequenceSlice seq{0, args.prompt_tokens, 0, table};
  int32_t last = args.prompt_tokens - 1;
  HEARTH_ASSIGN_OR_RETURN(int32_t token, next_token({prompt, positions, {&seq, 1}, {&last, 1}}));
  r.prefill_s = watch.elapsed_seconds();
  r.ttft_s = watch.elapsed_seconds();
  watch.reset();
  for (int i = 0; i < args.tokens; ++i) {
    int32_t pos = args.prompt_tokens + i;
    SequenceSlice s{0, 1, pos, table};
    int32_t row = 0;
    HEARTH_ASSIGN_OR_RETURN(token, next_token({{&token, 1}, {&pos, 1}, {&s, 1}, {&row, 1}}));
  }
  r.decode_s = watch.elapsed_seconds();
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run_benchmark(const BenchmarkArgs& args) {
  if (args.prompt_tokens < 1 || args.tokens < 1 || args.runs < 1 || args.threads < 0) {
    std::fprintf(stderr, "hearth benchmark: --prompt-tokens, --tokens, --runs must be >= 1\n");
    return kExitUsage;
  }
  auto load_options = device_load_options(args.device, args.threads);
  if (!load_options.ok()) {
    std::fprintf(stderr, "hearth benchmark: %s\n", load_options.status().message().c_str());
    return kExitFailure;
  }
  Stopwatch load_watch;
  auto model = load_model(args.model, *load_options);
  if (!model.ok()) {
    std::fprintf(stderr, "hearth benchmark: %s\n", model.status().message().c_str());
    return kExitFailure;
  }
  const double load_s = load_watch.elapsed_seconds();
  const int block_size = 16;
  const uint64_t kv_bytes =
      (*model)->kv_bytes_per_block(block_size) *
      static_cast<uint64_t>((args.prompt_tokens + args.tokens + block_size - 1) / block_size);
  if (Status st = check_host_memory_budget(*load_options, **model, kv_bytes); !st.ok()) {
    std::fprintf(stderr, "hearth benchmark: %s\n", st.message().c_str());
    return kExitFailure;
  }
  const int total = args.prompt_tokens + args.tokens;
  if (total > (*model)->config().max_position_embeddings) {
    std::fprintf(stderr, "hearth benchmark: %d tokens exceed the model's context of %d\n", total,
                 (*model)->config().max_position_embeddings);
    return kExitUsage;
  }
  // One untimed warm-up pass (page faults of the mapped weights, thread start-up).
  BenchmarkArgs warm = args;
  warm.prompt_tokens = std::min(args.prompt_tokens, 8);
  warm.tokens = 2;
  if (auto w = run_once(**model, warm, 0); !w.ok()) {
    std::fprintf(stderr, "hearth benchmark: %s\n", w.status().message().c_str());
    return kExitFailure;
  }
  std::vector<RunResult> runs;
  for (int i = 0; i < args.runs; ++i) {
    auto r = run_once(**model, args, static_cast<uint64_t>(i + 1));
    if (!r.ok()) {
      std::fprintf(stderr, "hearth benchmark: %s\n", r.status().message().c_str());
      return kExitFailure;
    }
    runs.push_back(*r);
  }
  std::vector<double> pp, tg, ttft;
  for (const auto& r : runs) {
    pp.push_back(args.prompt_tokens / r.prefill_s);
    tg.push_back(args.tokens / r.decode_s);
    ttft.push_back(r.ttft_s * 1e3);
  }
  const std::string levers = (*model)->describe();
  const std::size_t weight_bytes = (*model)->weight_bytes();
  const std::string device = device_label(*load_options);
  const std::optional<DeviceMemoryUsage> device_memory = (*model)->device_memory();
  const double peak_device_mib =
      device_memory ? static_cast<double>(device_memory->peak_bytes) / (1 << 20) : 0.0;
  nlohmann::json engine_report;
  if (!args.concurrency.empty()) {
    EngineLevelsSpec spec;
    spec.concurrency = args.concurrency;
    spec.prompt_tokens = args.prompt_tokens;
    spec.tokens = args.tokens;
    spec.prefix_tokens = args.prefix_tokens;
    spec.max_batched_tokens = args.max_batched_tokens;
    spec.memory_budget_gb = args.device.memory_budget_gb;
    spec.gpu_memory_utilization = args.gpu_memory_utilization;
    auto report = run_engine_levels(std::move(*model), spec);
    if (!report.ok()) {
      std::fprintf(stderr, "hearth benchmark: %s\n", report.status().message().c_str());
      return kExitFailure;
    }
    engine_report = std::move(*report);
  }
  if (args.json) {
    nlohmann::json out = {
        {"model", args.model},
        {"prompt_tokens", args.prompt_tokens},
        {"tokens", args.tokens},
        {"runs", args.runs},
        {"prefill_tok_s", median(pp)},
        {"decode_tok_s", median(tg)},
        {"ttft_ms", median(ttft)},
        {"prefill_tok_s_runs", pp},
        {"decode_tok_s_runs", tg},
        {"ttft_ms_runs", ttft},
        {"load_s", load_s},
        {"weight_bytes", weight_bytes},
        {"peak_rss_mib", peak_rss_mib()},
        {"device", device},
        {"compiled_decode", load_options->device == Device::kCuda && load_options->compiled_decode},
        {"kv_scheme", "bf16 paged"},
        {"levers", levers}};
    if (device_memory) out["peak_device_mib"] = peak_device_mib;
    if (!engine_report.is_null()) out["engine"] = engine_report;
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("model    %s\ndevice   %s\nlevers   %s\n", args.model.c_str(), device.c_str(),
              levers.c_str());
  std::printf("prefill  %.1f tok/s (pp%d, median of %d)\n", median(pp), args.prompt_tokens,
              args.runs);
  std::printf("decode   %.2f tok/s (tg%d, median of %d)\n", median(tg), args.tokens, args.runs);
  std::printf("ttft     %.1f ms\n", median(ttft));
  for (int i = 0; i < args.runs; ++i) {
    std::printf("run %d    prefill %.1f tok/s, decode %.2f tok/s, ttft %.1f ms\n", i + 1, pp[i],
                tg[i], ttft[i]);
  }
  std::printf("memory   peak RSS %.0f MiB (weights %.0f MiB), load %.2f s\n", peak_rss_mib(),
              static_cast<double>(weight_bytes) / (1 << 20), load_s);
  if (device_memory) std::printf("device   peak %.0f MiB\n", peak_device_mib);
  if (!engine_report.is_null()) std::printf("%s", format_engine_levels(engine_report).c_str());
  return kExitOk;
}

int run_serving_benchmark(const BenchmarkArgs& args) {
  if (!args.model.empty()) {
    std::fprintf(stderr, "hearth benchmark: --url measures a running server; drop the model\n");
    return kExitUsage;
  }
  server::ServingBenchOptions options;
  options.url = args.url;
  options.concurrency = args.concurrency.empty() ? std::vector<int>{1} : args.concurrency;
  options.prompt_tokens = args.prompt_tokens;
  options.tokens = args.tokens;
  options.requests = args.requests;
  options.api_key = args.api_key;
  return server::run_serving_benchmark_cli(options, args.json);
}

}  // namespace

Verb add_benchmark_verb(CLI::App& app) {
  auto args = std::make_shared<BenchmarkArgs>();
  CLI::App* cmd = app.add_subcommand("benchmark", "Measure prefill and decode speed of a model");
  cmd->add_option("model", args->model, "Model directory (not with --url)");
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt length (random tokens)")
      ->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "Tokens to decode per run")->capture_default_str();
  cmd->add_option("--runs", args->runs, "Timed runs (median reported)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0: every available core)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  add_device_flags(cmd, args->device);
  cmd->add_option("--concurrency", args->concurrency,
                  "Also run the engine with this many concurrent requests of --prompt-tokens "
                  "random tokens x --tokens generated (greedy, EOS ignored); a list: 1,8,32")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prefix-tokens", args->prefix_tokens,
                  "With --concurrency: also time the first token of a 16-token suffix after a "
                  "cached prefix of this many tokens")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-batched-tokens", args->max_batched_tokens,
                  "With --concurrency: tokens per engine step (0: the engine default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu-memory-utilization", args->gpu_memory_utilization,
                  "With --concurrency: share of device memory for weights + KV + headroom when "
                  "sizing the KV pool (0: the default, 0.9 on a GPU)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--url", args->url,
                  "Serving benchmark: drive the API of the server at this base URL "
                  "(e.g. http://127.0.0.1:8080) with --concurrency levels of --prompt-tokens "
                  "prompts x --tokens completions; reports TTFT, inter-token latency p50/p99 "
                  "and throughput per level");
  cmd->add_option("--requests", args->requests,
                  "With --url: requests per level (0: 4 x concurrency, at least 8)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--api-key", args->api_key, "With --url: the server's API key");
  return Verb{cmd, [args] {
                if (!args->url.empty()) return run_serving_benchmark(*args);
                if (args->model.empty()) {
                  std::fprintf(stderr, "hearth benchmark: give a model directory or --url\n");
                  return kExitUsage;
                }
                return run_benchmark(*args);
              }};
}

}  // namespace hearth::cli
