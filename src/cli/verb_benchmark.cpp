// `hearth benchmark <model-dir>`: prefill and decode speed of the CPU forward on random
// prompt tokens: prefill tok/s, time to first token, decode tok/s (median of runs and each
// run), peak memory and the levers in effect.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "base/clock.h"
#include "cli/verb.h"
#include "models/model.h"

namespace hearth::cli {
namespace {

struct BenchmarkArgs {
  std::string model;
  int prompt_tokens = 128;
  int tokens = 32;
  int runs = 3;
  int threads = 0;
  bool json = false;
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

  RunResult r;
  Stopwatch watch;
  SequenceSlice seq{0, args.prompt_tokens, 0, table};
  int32_t last = args.prompt_tokens - 1;
  HEARTH_RETURN_IF_ERROR(model.forward({prompt, positions, {&seq, 1}, {&last, 1}}, logits));
  r.prefill_s = watch.elapsed_seconds();
  int32_t token =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  r.ttft_s = watch.elapsed_seconds();
  watch.reset();
  for (int i = 0; i < args.tokens; ++i) {
    int32_t pos = args.prompt_tokens + i;
    SequenceSlice s{0, 1, pos, table};
    int32_t row = 0;
    HEARTH_RETURN_IF_ERROR(model.forward({{&token, 1}, {&pos, 1}, {&s, 1}, {&row, 1}}, logits));
    token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
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
  Stopwatch load_watch;
  auto model = load_model(args.model, LoadOptions{args.threads, KernelKind::kCpu});
  if (!model.ok()) {
    std::fprintf(stderr, "hearth benchmark: %s\n", model.status().message().c_str());
    return kExitFailure;
  }
  const double load_s = load_watch.elapsed_seconds();
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
  if (args.json) {
    nlohmann::json out = {{"model", args.model},
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
                          {"weight_bytes", (*model)->weight_bytes()},
                          {"peak_rss_mib", peak_rss_mib()},
                          {"levers", levers}};
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("model    %s\nlevers   %s\n", args.model.c_str(), levers.c_str());
  std::printf("prefill  %.1f tok/s (pp%d, median of %d)\n", median(pp), args.prompt_tokens,
              args.runs);
  std::printf("decode   %.2f tok/s (tg%d, median of %d)\n", median(tg), args.tokens, args.runs);
  std::printf("ttft     %.1f ms\n", median(ttft));
  for (int i = 0; i < args.runs; ++i) {
    std::printf("run %d    prefill %.1f tok/s, decode %.2f tok/s, ttft %.1f ms\n", i + 1, pp[i],
                tg[i], ttft[i]);
  }
  std::printf("memory   peak RSS %.0f MiB (weights %.0f MiB mapped), load %.2f s\n", peak_rss_mib(),
              static_cast<double>((*model)->weight_bytes()) / (1 << 20), load_s);
  return kExitOk;
}

}  // namespace

Verb add_benchmark_verb(CLI::App& app) {
  auto args = std::make_shared<BenchmarkArgs>();
  CLI::App* cmd = app.add_subcommand("benchmark", "Measure prefill and decode speed of a model");
  cmd->add_option("model", args->model, "Model directory")->required();
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt length (random tokens)")
      ->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "Tokens to decode per run")->capture_default_str();
  cmd->add_option("--runs", args->runs, "Timed runs (median reported)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0: every available core)")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return Verb{cmd, [args] { return run_benchmark(*args); }};
}

}  // namespace hearth::cli
