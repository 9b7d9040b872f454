// `hearth fit <model>`: weights + KV cache + activations against this machine's GPU
// memory or RAM; a verdict and the longest context that fits.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "cli/verb.h"
#include "hub/fit.h"
#include "hub/format.h"
#include "hub/hub_config.h"
#include "hub/model_summary.h"
#include "hub/resolve.h"

namespace hearth::cli {
namespace {

struct FitArgs {
  std::string model;
  std::int64_t context = 0;  // 0: the model's maximum
  int batch = 1;
  double memory_budget_gb = 0;  // 0: detect
  bool json = false;
};

int fail(const Status& st) {
  std::fprintf(stderr, "hearth fit: %s\n", st.message().c_str());
  return kExitFailure;
}

int run_fit(const FitArgs& args) {
  hub::HubConfig config = hub::hub_config_from_env();
  auto model = hub::resolve_model(args.model, config.cache_dir);
  if (!model.ok()) return fail(model.status());
  auto summary = hub::summarize_model(model->dir);
  if (!summary.ok()) return fail(summary.status());
  if (summary->num_layers == 0 || summary->num_kv_heads == 0 || summary->head_dim == 0) {
    return fail(unsupported_error("{}: config.json lacks the layer / head sizes fit needs",
                                  model->dir.string()));
  }
  hub::MemoryBudget budget;
  if (args.memory_budget_gb > 0) {
    budget.bytes = budget.total = static_cast<std::uint64_t>(args.memory_budget_gb * 1e9);
    budget.source = "--memory-budget";
  } else {
    auto detected = hub::detect_memory_budget();
    if (!detected.ok()) return fail(detected.status());
    budget = *detected;
  }
  std::int64_t context = args.context > 0 ? args.context : summary->context_length.value_or(4096);
  hub::FitEstimate e = hub::estimate_fit(*summary, context, args.batch, budget);
  std::string name = model->repo_id.empty() ? model->dir.string() : model->repo_id;
  if (args.json) {
    nlohmann::json out = {{"model", name},
                          {"path", model->dir.string()},
                          {"context", context},
                          {"batch", args.batch},
                          {"budget_bytes", budget.bytes},
                          {"memory_source", budget.source},
                          {"gpu", budget.gpu},
                          {"weights_bytes", e.weights},
                          {"kv_bytes_per_token", e.kv_per_token},
                          {"kv_bytes", e.kv},
                          {"activation_bytes", e.activations},
                          {"overhead_bytes", e.overhead},
                          {"total_bytes", e.total},
                          {"fits", e.fits},
                          {"max_context", e.max_context}};
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  using hub::format_bytes;
  std::printf("model        %s (%s)\n", name.c_str(), model->dir.c_str());
  std::printf("memory       %s usable (%s)\n", format_bytes(budget.bytes).c_str(),
              budget.source.c_str());
  std::printf("weights      %s\n", format_bytes(e.weights).c_str());
  std::printf("KV cache     %s (%lld tokens x batch %d, %s per token, bf16)\n",
              format_bytes(e.kv).c_str(), static_cast<long long>(context), args.batch,
              format_bytes(e.kv_per_token).c_str());
  std::printf("activations  %s\n", format_bytes(e.activations).c_str());
  std::printf("overhead     %s\n", format_bytes(e.overhead).c_str());
  std::printf("total        %s\n", format_bytes(e.total).c_str());
  std::printf("verdict      %s\n", e.fits ? "fits" : "does not fit");
  std::string model_max = summary->context_length
                              ? fmt::format(" (model maximum {})", *summary->context_length)
                              : std::string();
  if (e.max_context > 0) {
    std::printf("longest context that fits at batch %d: %lld tokens%s\n", args.batch,
                static_cast<long long>(e.max_context), model_max.c_str());
  } else {
    std::printf(
        "no context fits at batch %d: weights and runtime overhead alone exceed the budget\n",
        args.batch);
  }
  return kExitOk;
}

}  // namespace

Verb add_fit_verb(CLI::App& app) {
  auto args = std::make_shared<FitArgs>();
  CLI::App* cmd = app.add_subcommand(
      "fit", "Will a model fit this machine's GPU memory or RAM, and at what context length?");
  cmd->add_option("model", args->model, "A path, a repo id, or a query over downloaded models")
      ->required();
  cmd->add_option("--context", args->context, "Context length in tokens (default: the model's)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  cmd->add_option("--batch", args->batch, "Concurrent sequences, each with a full context")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--memory-budget", args->memory_budget_gb,
                  "Memory to plan against in GB (default: detected)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "Print the estimate as JSON");
  return {cmd, [args] { return run_fit(*args); }};
}

}  // namespace hearth::cli
