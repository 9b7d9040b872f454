// `hearth generate [model] --prompt S` (alias `gen`): load a model, run one request through the
// engine, stream the completion to stdout and the speeds to stderr. The same path the server
// takes (chat template, tokenizer, Engine, Sampler), with every parameter on the command line.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/clock.h"
#include "cli/device_flags.h"
#include "cli/verb.h"
#include "engine/engine.h"
#include "hub/hub_config.h"
#include "hub/resolve.h"
#include "models/model.h"
#include "text/chat_template.h"
#include "text/streaming_decoder.h"
#include "text/tokenizer.h"

namespace hearth::cli {
namespace {

constexpr int kDefaultMaxTokens = 512;

struct GenerateArgs {
  std::string model;
  std::string prompt;
  bool raw = false;
  std::optional<int> max_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool json = false;
  int threads = 0;
  DeviceArgs device;
};

// Tokens and the finish as the engine thread reports them, waited on by the main thread.
class QueueSink : public engine::RequestSink {
 public:
  void on_tokens(std::span<const int32_t> tokens,
                 std::span<const engine::TokenLogprobs> /*logprobs*/) override {
    const int64_t now = monotonic_ns();
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_token_ns_ == 0) first_token_ns_ = now;
    pending_.insert(pending_.end(), tokens.begin(), tokens.end());
    ready_.notify_one();
  }
  void on_finish(const engine::FinishInfo& info) override {
    const int64_t now = monotonic_ns();
    std::lock_guard<std::mutex> lock(mutex_);
    finish_ = info;
    finish_ns_ = now;
    ready_.notify_one();
  }
  // Blocks until tokens arrive or the request finished; moves the new tokens into `out`.
  // Returns false once finished and drained.
  bool wait(std::vector<int32_t>& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return !pending_.empty() || finish_.has_value(); });
    out.assign(pending_.begin(), pending_.end());
    pending_.clear();
    return !out.empty() || !finish_.has_value();
  }
  engine::FinishInfo finish() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return *finish_;
  }
  int64_t first_token_ns() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_token_ns_;
  }
  int64_t finish_ns() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return finish_ns_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<int32_t> pending_;
  std::optional<engine::FinishInfo> finish_;
  int64_t first_token_ns_ = 0;
  int64_t finish_ns_ = 0;
};

int fail(const Status& st) {
  std::fprintf(stderr, "hearth generate: %s\n", st.message().c_str());
  return kExitFailure;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// The model argument through the hub's resolution; none given: the default model.
Result<std::string> resolve_model_dir(const std::string& query) {
  const hub::HubConfig hub = hub::hub_config_from_env();
  if (query.empty()) {
    HEARTH_ASSIGN_OR_RETURN(hub::ResolvedModel m, hub::default_model(hub.cache_dir));
    std::fprintf(stderr, "hearth generate: no model given, using %s (%s)\n",
                 m.repo_id.empty() ? m.dir.c_str() : m.repo_id.c_str(), m.source.c_str());
    return m.dir.string();
  }
  HEARTH_ASSIGN_OR_RETURN(hub::ResolvedModel m, hub::resolve_model(query, hub.cache_dir));
  return m.dir.string();
}

// Sampling parameters: flags first, then generation_config.json. As in transformers, the
// config's temperature / top-p / top-k / min-p apply only when it sets do_sample; otherwise
// the default is greedy.
engine::SamplingParams sampling_params(const GenerateArgs& args, const ModelConfig& config) {
  const GenerationDefaults& gen = config.generation;
  const bool sample = gen.do_sample.value_or(false);
  engine::SamplingParams p;
  p.temperature = args.temperature.value_or(sample ? gen.temperature.value_or(1.0f) : 0.0f);
  p.top_p = args.top_p.value_or(sample ? gen.top_p.value_or(1.0f) : 1.0f);
  p.top_k = args.top_k.value_or(sample ? gen.top_k.value_or(0) : 0);
  p.min_p = args.min_p.value_or(sample ? gen.min_p.value_or(0.0f) : 0.0f);
  if (gen.repetition_penalty) p.repetition_penalty = *gen.repetition_penalty;
  p.seed = args.seed;
  p.ignore_eos = args.ignore_eos;
  return p;
}

Result<std::vector<int32_t>> prompt_ids(const GenerateArgs& args, const std::string& dir,
                                        const text::Tokenizer& tokenizer) {
  if (args.raw) return tokenizer.encode(args.prompt, /*add_special_tokens=*/true);
  auto tmpl = text::ChatTemplate::load(dir);
  if (!tmpl.ok()) {
    return tmpl.status().with_context("reading the chat template (use --raw to skip it)");
  }
  nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", args.prompt}}});
  HEARTH_ASSIGN_OR_RETURN(
      std::string rendered,
      tmpl->render(messages, nullptr, /*add_generation_prompt=*/true, nlohmann::json::object()));
  // The template writes any BOS itself, as apply_chat_template(tokenize=True) assumes.
  return tokenizer.encode(rendered, /*add_special_tokens=*/false);
}

int run_generate(const GenerateArgs& args) {
  if (args.max_tokens && *args.max_tokens < 1) {
    std::fprintf(stderr, "hearth generate: --max-tokens must be >= 1\n");
    return kExitUsage;
  }
  if (args.threads < 0) {
    std::fprintf(stderr, "hearth generate: --threads must be >= 0\n");
    return kExitUsage;
  }
  auto dir = resolve_model_dir(args.model);
  if (!dir.ok()) return fail(dir.status());
  auto load_options = device_load_options(args.device, args.threads);
  if (!load_options.ok()) return fail(load_options.status());
  // The model loads (device start, weight upload) while the tokenizer loads and the prompt
  // is encoded: both are on the way to the first token. An early return waits for the load.
  auto model_future = std::async(std::launch::async,
                                 [&dir, &load_options] { return load_model(*dir, *load_options); });
  auto tokenizer = text::Tokenizer::load(*dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  auto ids = prompt_ids(args, *dir, *tokenizer);
  if (!ids.ok()) return fail(ids.status());
  if (ids->empty()) return fail(invalid_argument_error("the prompt encodes to no tokens"));

  auto model = model_future.get();
  if (!model.ok()) return fail(model.status());
  const ModelConfig& config = (*model)->config();
  engine::SamplingParams params = sampling_params(args, config);
  const int prompt_tokens = static_cast<int>(ids->size());
  const int context_left = config.max_position_embeddings - prompt_tokens;
  if (context_left < 1) {
    return fail(invalid_argument_error("the prompt's {} tokens fill the model's context of {}",
                                       prompt_tokens, config.max_position_embeddings));
  }
  // An explicit --max-tokens is taken as asked (the engine refuses one over the context);
  // the default is cut to what the context leaves.
  params.max_tokens = args.max_tokens.value_or(std::min(kDefaultMaxTokens, context_left));
  if (Status st = params.validate(config.vocab_size); !st.ok()) {
    std::fprintf(stderr, "hearth generate: %s\n", st.message().c_str());
    return kExitUsage;
  }

  engine::EngineOptions options;
  options.max_batch = 1;
  options.warm_up = false;  // one request: its own steps are the only shapes it meets
  options.num_blocks =
      (prompt_tokens + params.max_tokens + options.block_size - 1) / options.block_size;
  // The model's EOS ids and the tokenizer's (tokenizer_config.json eos_token) together.
  options.eos_ids = config.generation.eos_token_ids;
  for (int32_t id : tokenizer->eos_ids()) {
    if (std::find(options.eos_ids.begin(), options.eos_ids.end(), id) == options.eos_ids.end()) {
      options.eos_ids.push_back(id);
    }
  }
  Status budget = check_host_memory_budget(
      *load_options, **model,
      static_cast<uint64_t>(options.num_blocks) * (*model)->kv_bytes_per_block(options.block_size));
  if (!budget.ok()) return fail(budget);
  auto engine = engine::Engine::create(std::move(model).value(), options);
  if (!engine.ok()) return fail(engine.status());

  auto sink = std::make_shared<QueueSink>();
  const int64_t submit_ns = monotonic_ns();
  auto id = (*engine)->submit(*ids, params, sink);
  if (!id.ok()) return fail(id.status());

  text::StreamingDecoder decoder(*tokenizer, /*skip_special_tokens=*/true);
  std::vector<int32_t> completion;
  std::string text;
  std::vector<int32_t> batch;
  while (sink->wait(batch)) {
    for (int32_t t : batch) {
      completion.push_back(t);
      std::string piece = decoder.push(t);
      if (args.json) {
        text += piece;
      } else if (!piece.empty()) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    }
  }
  const std::string tail = decoder.flush();
  if (args.json) {
    text += tail;
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);  // piped output is the completion only
    std::fflush(stdout);
  }
  (*engine)->shutdown();

  const engine::FinishInfo finish = sink->finish();
  if (finish.reason == engine::FinishReason::kError) return fail(finish.status);
  const std::string_view reason = engine::finish_reason_name(finish.reason);
  if (args.json) {
    nlohmann::json out = {{"text", text},
                          {"token_ids", completion},
                          {"prompt_tokens", finish.prompt_tokens},
                          {"completion_tokens", finish.completion_tokens},
                          {"finish_reason", reason}};
    // Invalid UTF-8 (a stream cut mid-character) becomes U+FFFD rather than an exception.
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }

  const int64_t first_ns = sink->first_token_ns();
  const double prefill_s = first_ns > 0 ? (first_ns - submit_ns) * 1e-9 : 0.0;
  const double decode_s = first_ns > 0 ? (sink->finish_ns() - first_ns) * 1e-9 : 0.0;
  const int decoded = std::max(0, finish.completion_tokens - 1);  // after the first token
  std::fprintf(stderr, "prompt: %d tokens, %.1f tok/s (first token after %.0f ms)\n", prompt_tokens,
               prefill_s > 0 ? prompt_tokens / prefill_s : 0.0, prefill_s * 1e3);
  std::fprintf(stderr, "decode: %d tokens, %.1f tok/s; finish: %.*s\n", finish.completion_tokens,
               decode_s > 0 ? decoded / decode_s : 0.0, static_cast<int>(reason.size()),
               reason.data());
  std::fprintf(stderr, "peak memory: %.0f MiB\n", peak_rss_mib());
  return kExitOk;
}

}  // namespace

Verb add_generate_verb(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion for one prompt");
  cmd->alias("gen");
  cmd->add_option("model", args->model,
                  "Model: a directory, a repo id or a query over downloaded models "
                  "(default: the newest download, else the starter model)");
  cmd->add_option("--prompt,-p", args->prompt, "The prompt (a user message unless --raw)")
      ->required();
  cmd->add_flag("--raw", args->raw, "Encode the prompt as is, without the chat template");
  cmd->add_option("--max-tokens", args->max_tokens,
                  "Tokens to generate at most (default 512, cut to the context)");
  cmd->add_option("--temperature,--temp", args->temperature,
                  "Sampling temperature; 0 = greedy (default: generation_config.json)");
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass (default: generation_config)");
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens; 0 = off");
  cmd->add_option("--min-p", args->min_p, "Drop tokens below min-p x the top probability");
  cmd->add_option("--seed", args->seed, "Sampling seed (same seed, same tokens)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", args->json, "Print one JSON object instead of streaming text");
  cmd->add_option("--threads", args->threads, "CPU threads (0: every available core)")
      ->capture_default_str();
  add_device_flags(cmd, args->device);
  return Verb{cmd, [args] { return run_generate(*args); }};
}

}  // namespace hearth::cli
