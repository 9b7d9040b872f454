// `hearth perplexity [model] --data FILE`: perplexity and its standard error with
// mlx_lm.perplexity's method — documents tokenized and concatenated, cut into rows of
// --sequence-length, each row scored on its own from an empty context.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "base/clock.h"
#include "base/mapped_file.h"
#include "cli/device_flags.h"
#include "cli/verb.h"
#include "hub/hub_config.h"
#include "hub/resolve.h"
#include "models/model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace hearth::cli {
namespace {

struct PerplexityArgs {
  std::string model;
  std::string data;
  int sequence_length = 512;
  int num_samples = 256;  // -1: every row the data makes
  int batch_size = 8;
  uint64_t seed = 123;
  int threads = 0;
  std::string cpu_int8_dot = kCpuInt8DotDefault;  // on | off
  std::string cpu_bf16_dot = kCpuBf16DotDefault;  // on | off
  bool json = false;
};

// Logits of at most this many floats per forward pass (rows x vocab); batches shrink to fit.
constexpr int64_t kMaxLogitFloats = int64_t{64} << 20;

int fail(const Status& st) {
  std::fprintf(stderr, "hearth perplexity: %s\n", st.message().c_str());
  return kExitFailure;
}

// numpy's legacy RandomState(seed).permutation(n): MT19937 seeded like init_genrand, then a
// Fisher-Yates shuffle from the end drawing j in [0, i] by masked rejection on 32-bit draws.
std::vector<std::size_t> numpy_permutation(std::size_t n, uint64_t seed) {
  std::mt19937 mt(static_cast<uint32_t>(seed));
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = n > 0 ? n - 1 : 0; i > 0; --i) {
    uint32_t mask = static_cast<uint32_t>(i);
    for (int s = 1; s < 32; s <<= 1) mask |= mask >> s;
    uint32_t j = 0;
    do {
      j = mt() & mask;
    } while (j > i);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

// One .jsonl record's tokens as mlx_lm's datasets make them: {"text"} encoded with special
// tokens plus EOS unless it ends in one; {"messages"} or {"prompt","completion"} through the
// chat template.
Result<std::vector<int32_t>> record_tokens(const nlohmann::json& rec, const std::string& kind,
                                           const text::Tokenizer& tok,
                                           const text::ChatTemplate* tmpl) {
  if (kind == "text") {
    if (!rec.contains("text") || !rec["text"].is_string()) {
      return invalid_argument_error("a record has no string \"text\"");
    }
    HEARTH_ASSIGN_OR_RETURN(auto ids, tok.encode(rec["text"].get<std::string>(), true));
    const auto eos = tok.eos_ids();
    if (!eos.empty() && (ids.empty() || ids.back() != eos.front())) ids.push_back(eos.front());
    return ids;
  }
  nlohmann::json messages;
  if (kind == "messages") {
    messages = rec.value("messages", nlohmann::json());
  } else {
    messages =
        nlohmann::json::array({{{"role", "user"}, {"content", rec.value("prompt", "")}},
                               {{"role", "assistant"}, {"content", rec.value("completion", "")}}});
  }
  if (!messages.is_array()) return invalid_argument_error("a record's messages is no array");
  const nlohmann::json tools = rec.contains("tools") ? rec["tools"] : nlohmann::json();
  HEARTH_ASSIGN_OR_RETURN(std::string rendered,
                          tmpl->render(messages, tools, false, nlohmann::json::object()));
  return tok.encode(rendered, false);
}

// The token stream: a .jsonl file's records in numpy's permuted order (mlx_lm's load_data),
// or a plain-text file as one document encoded without special tokens.
Result<std::vector<int32_t>> load_tokens(const PerplexityArgs& args, const std::string& dir,
                                         const text::Tokenizer& tok, int64_t wanted) {
  HEARTH_ASSIGN_OR_RETURN(std::string content, read_file(args.data));
  const bool jsonl = args.data.size() >= 6 && args.data.ends_with(".jsonl");
  if (!jsonl) return tok.encode(content, false);

  std::vector<nlohmann::json> records;
  std::size_t start = 0;
  for (int line = 1; start < content.size(); ++line) {
    std::size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    std::string_view text(content.data() + start, end - start);
    start = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto rec = nlohmann::json::parse(text, nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) {
      return invalid_argument_error("{}:{}: not a JSON object", args.data, line);
    }
    records.push_back(std::move(rec));
  }
  if (records.empty()) return invalid_argument_error("{}: no records", args.data);
  const nlohmann::json& first = records.front();
  std::string kind = first.contains("prompt") && first.contains("completion") ? "completion"
                     : first.contains("messages")                             ? "messages"
                     : first.contains("text")                                 ? "text"
                                                                              : "";
  if (kind.empty()) {
    return invalid_argument_error(
        "{}: records need \"text\", \"messages\" or \"prompt\" + \"completion\"", args.data);
  }
  std::optional<text::ChatTemplate> tmpl;
  if (kind != "text") {
    auto loaded = text::ChatTemplate::load(dir);
    if (!loaded.ok()) return loaded.status().with_context("chat records need the chat template");
    tmpl = std::move(loaded).value();
  }
  std::vector<int32_t> tokens;
  for (std::size_t index : numpy_permutation(records.size(), args.seed)) {
    if (static_cast<int64_t>(tokens.size()) >= wanted) break;
    auto ids = record_tokens(records[index], kind, tok, tmpl ? &*tmpl : nullptr);
    if (!ids.ok())
      return ids.status().with_context(fmt::format("{} record {}", args.data, index + 1));
    tokens.insert(tokens.end(), ids->begin(), ids->end());
  }
  return tokens;
}

// Per-token negative log-likelihoods of rows [r0, r1), each row scored from an empty context.
Status score_rows(Model& model, const std::vector<int32_t>& tokens, int length, int r0, int r1,
                  std::vector<double>& nll) {
  const int vocab = model.config().vocab_size;
  const int inputs = length - 1;  // the row's last token is only a target
  const int block_size = model.kv_block_size();
  const int blocks_per_row = (inputs + block_size - 1) / block_size;
  std::vector<int32_t> batch_tokens, positions, tables, logit_rows;
  std::vector<SequenceSlice> seqs;
  for (int r = r0; r < r1; ++r) {
    const int32_t first = static_cast<int32_t>(batch_tokens.size());
    for (int t = 0; t < inputs; ++t) {
      batch_tokens.push_back(tokens[static_cast<std::size_t>(r) * length + t]);
      positions.push_back(t);
      logit_rows.push_back(first + t);
    }
  }
  tables.resize(static_cast<std::size_t>(r1 - r0) * blocks_per_row);
  std::iota(tables.begin(), tables.end(), 0);
  for (int r = r0; r < r1; ++r) {
    const int i = r - r0;
    seqs.push_back(SequenceSlice{
        i * inputs, inputs, 0,
        std::span<const int32_t>(tables).subspan(static_cast<std::size_t>(i) * blocks_per_row,
                                                 static_cast<std::size_t>(blocks_per_row))});
  }
  std::vector<float> logits(logit_rows.size() * static_cast<std::size_t>(vocab));
  HEARTH_RETURN_IF_ERROR(model.forward({batch_tokens, positions, seqs, logit_rows}, logits));
  for (std::size_t i = 0; i < logit_rows.size(); ++i) {
    const float* row = logits.data() + i * vocab;
    const int r = r0 + static_cast<int>(i) / inputs;
    const int t = static_cast<int>(i) % inputs;
    const int32_t target = tokens[static_cast<std::size_t>(r) * length + t + 1];
    const float max = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - max));
    nll.push_back(std::log(sum) + max - row[target]);
  }
  return ok_status();
}

Result<std::string> resolve_model_dir(const std::string& query) {
  const hub::HubConfig hub = hub::hub_config_from_env();
  if (query.empty()) {
    HEARTH_ASSIGN_OR_RETURN(hub::ResolvedModel m, hub::default_model(hub.cache_dir));
    std::fprintf(stderr, "hearth perplexity: no model given, using %s (%s)\n",
                 m.repo_id.empty() ? m.dir.c_str() : m.repo_id.c_str(), m.source.c_str());
    return m.dir.string();
  }
  HEARTH_ASSIGN_OR_RETURN(hub::ResolvedModel m, hub::resolve_model(query, hub.cache_dir));
  return m.dir.string();
}

int run_perplexity(const PerplexityArgs& args) {
  if (args.sequence_length < 2 || args.batch_size < 1 || args.threads < 0 ||
      args.num_samples == 0 || args.num_samples < -1) {
    std::fprintf(stderr,
                 "hearth perplexity: --sequence-length must be >= 2, --batch-size >= 1, "
                 "--num-samples >= 1 or -1\n");
    return kExitUsage;
  }
  auto dir = resolve_model_dir(args.model);
  if (!dir.ok()) return fail(dir.status());
  auto tokenizer = text::Tokenizer::load(*dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  LoadOptions load_options{args.threads, KernelKind::kCpu};
  load_options.cpu_int8_dot = args.cpu_int8_dot == "on";
  load_options.cpu_bf16_dot = args.cpu_bf16_dot == "on";
  auto model = load_model(*dir, load_options);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& config = (*model)->config();
  if (args.sequence_length - 1 > config.max_position_embeddings) {
    return fail(invalid_argument_error("--sequence-length {} exceeds the model's context of {}",
                                       args.sequence_length, config.max_position_embeddings));
  }
  const int64_t length = args.sequence_length;
  const int64_t wanted = args.num_samples > 0 ? length * args.num_samples : INT64_MAX;
  auto tokens = load_tokens(args, *dir, *tokenizer, wanted);
  if (!tokens.ok()) return fail(tokens.status());
  int64_t rows = static_cast<int64_t>(tokens->size()) / length;
  if (args.num_samples > 0) rows = std::min<int64_t>(rows, args.num_samples);
  if (rows == 0) {
    return fail(invalid_argument_error("{} makes {} tokens, fewer than one row of {}", args.data,
                                       tokens->size(), length));
  }

  // Rows per forward pass: --batch-size, fewer when their logits would not fit the cap.
  const int64_t per_row_floats = (length - 1) * config.vocab_size;
  const int batch =
      static_cast<int>(std::clamp<int64_t>(kMaxLogitFloats / per_row_floats, 1, args.batch_size));
  const int block_size = 16;
  const int blocks = batch * static_cast<int>((length - 1 + block_size - 1) / block_size);
  if (Status st = (*model)->create_kv_cache(blocks, block_size); !st.ok()) return fail(st);

  const bool progress = isatty(STDERR_FILENO) && !args.json;
  std::vector<double> nll;
  nll.reserve(static_cast<std::size_t>(rows * (length - 1)));
  Stopwatch watch;
  for (int64_t r = 0; r < rows; r += batch) {
    const int r1 = static_cast<int>(std::min<int64_t>(rows, r + batch));
    if (Status st =
            score_rows(**model, *tokens, static_cast<int>(length), static_cast<int>(r), r1, nll);
        !st.ok()) {
      return fail(st);
    }
    if (progress)
      std::fprintf(stderr, "\r  scored %d / %lld rows", r1, static_cast<long long>(rows));
  }
  if (progress) std::fputc('\n', stderr);
  const double seconds = watch.elapsed_seconds();

  const double n = static_cast<double>(nll.size());
  const double mean = std::accumulate(nll.begin(), nll.end(), 0.0) / n;
  double var = 0;
  for (double x : nll) var += (x - mean) * (x - mean);
  var = nll.size() > 1 ? var / (n - 1) : 0.0;
  const double ppl = std::exp(mean);
  const double se = ppl * std::sqrt(var) / std::sqrt(n);  // delta method
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;

  if (args.json) {
    nlohmann::json out = {{"model", *dir},
                          {"data", args.data},
                          {"perplexity", ppl},
                          {"standard_error", se},
                          {"mean_nll", mean},
                          {"rows", rows},
                          {"sequence_length", length},
                          {"scored_tokens", nll.size()},
                          {"data_tokens", tokens->size()},
                          {"seconds", seconds},
                          {"tokens_per_s", n / seconds},
                          {"peak_rss_mib", peak_mib}};
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("perplexity %.3f ± %.3f (mean NLL %.5f)\n", ppl, se, mean);
  std::printf("rows       %lld of %lld tokens (%.0f scored, from %zu data tokens)\n",
              static_cast<long long>(rows), static_cast<long long>(length), n, tokens->size());
  std::printf("time       %.2f s, %.0f tok/s, peak RSS %.0f MiB\n", seconds, n / seconds, peak_mib);
  return kExitOk;
}

}  // namespace

Verb add_perplexity_verb(CLI::App& app) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* cmd =
      app.add_subcommand("perplexity", "Perplexity of a model on a text or JSONL data set");
  cmd->add_option("model", args->model,
                  "Model: a directory, a repo id or a query over downloaded models");
  cmd->add_option("--data", args->data,
                  "A .jsonl data set (text / messages / prompt+completion) "
                  "or a plain-text file")
      ->required();
  cmd->add_option("--sequence-length", args->sequence_length, "Tokens per scored row")
      ->capture_default_str();
  cmd->add_option("--num-samples", args->num_samples, "Rows to score at most; -1: all")
      ->capture_default_str();
  cmd->add_option("--batch-size", args->batch_size, "Rows per forward pass")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the JSONL record order (numpy's permutation)")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0: every available core)")
      ->capture_default_str();
  add_cpu_int8_dot_flag(cmd, args->cpu_int8_dot);
  add_cpu_bf16_dot_flag(cmd, args->cpu_bf16_dot);
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return Verb{cmd, [args] { return run_perplexity(*args); }};
}

}  // namespace hearth::cli
