// `hearth serve [model]`: resolves and loads a model, starts its engine, and serves the
// OpenAI / Anthropic / Responses APIs until SIGINT or SIGTERM (then exits 0). Bare `hearth`
// runs this verb.
#include <fmt/format.h>

#include <cstdio>
#include <optional>

#include "base/log.h"
#include "cli/device_flags.h"
#include "cli/verb.h"
#include "engine/engine.h"
#include "hub/hub_config.h"
#include "hub/resolve.h"
#include "models/model.h"
#include "server/api_server.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace hearth::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string model_flag;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int http_threads = 2;
  int threads = 0;
  int batch = 8;
  double kv_budget_gb = 0;
  double prompt_cache_gb = -1;
  int block_size = 16;
  int max_model_len = 0;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<int> max_tokens;
  std::string thinking;  // "", "true", "false"
  DeviceArgs device;
  double gpu_memory_utilization = 0;
};

int fail(const Status& st) {
  std::fprintf(stderr, "hearth serve: %s\n", st.message().c_str());
  return kExitFailure;
}

int run_serve(const ServeArgs& args) {
  std::string query = args.model_flag.empty() ? args.model : args.model_flag;
  hub::HubConfig hub_config = hub::hub_config_from_env();
  auto resolved = query.empty() ? hub::default_model(hub_config.cache_dir)
                                : hub::resolve_model(query, hub_config.cache_dir);
  if (!resolved.ok()) return fail(resolved.status());
  std::string dir = resolved->dir.string();
  std::string id =
      resolved->repo_id.empty() ? resolved->dir.filename().string() : resolved->repo_id;
  if (resolved->source == "starter") id = "hearth-starter";

  server::GenerationDefaults defaults;
  defaults.temperature = args.temperature;
  defaults.top_p = args.top_p;
  defaults.top_k = args.top_k;
  defaults.max_tokens = args.max_tokens;
  if (args.thinking == "true") defaults.enable_thinking = true;
  if (args.thinking == "false") defaults.enable_thinking = false;

  // Bind first: a busy port fails in a second, not after loading gigabytes.
  server::HttpServerOptions http;
  http.host = args.host;
  http.port = args.port;
  http.threads = args.http_threads;
  std::shared_ptr<server::ApiServer> api;
  auto http_server = server::HttpServer::create(
      http, [&api](server::HttpRequest r, std::shared_ptr<server::Exchange> e) {
        api->handle(std::move(r), std::move(e));
      });
  if (!http_server.ok()) return fail(http_server.status());

  spdlog::info("loading {} from {}", id, dir);
  auto tokenizer = text::Tokenizer::load(dir);
  if (!tokenizer.ok()) return fail(tokenizer.status().with_context("loading the tokenizer"));
  std::optional<text::ChatTemplate> chat_template;
  if (auto t = text::ChatTemplate::load(dir); t.ok()) {
    chat_template = std::move(*t);
  } else {
    spdlog::warn("no usable chat template ({}); only /v1/completions will work",
                 t.status().message());
  }
  auto load_options = device_load_options(args.device, args.threads);
  if (!load_options.ok()) return fail(load_options.status());
  auto model = load_model(dir, *load_options);
  if (!model.ok()) return fail(model.status());
  spdlog::info("{}", (*model)->describe());
  engine::EngineOptions eo;
  eo.max_batch = args.batch;
  eo.kv_budget_gb = args.kv_budget_gb;
  eo.prompt_cache_gb = args.prompt_cache_gb;
  eo.block_size = args.block_size;
  eo.max_context = args.max_model_len;
  eo.cache_namespace = id;
  // On a GPU the pool is sized from the device memory left after the weights (the model
  // reports it); on CPU from RAM. Both under --memory-budget and the utilization share.
  eo.memory_budget_gb = args.device.memory_budget_gb;
  eo.gpu_memory_utilization = args.gpu_memory_utilization;
  auto engine = engine::Engine::create(std::move(*model), eo);
  if (!engine.ok()) return fail(engine.status());

  auto backend = std::make_shared<server::EngineBackend>(
      id, std::move(*engine), std::move(*tokenizer), std::move(chat_template));
  server::ApiServerOptions options;
  options.api_key = args.api_key;
  options.defaults = defaults;
  api = std::make_shared<server::ApiServer>(
      std::vector<std::shared_ptr<server::ModelBackend>>{backend}, options);
  api->set_http_server(http_server->get());
  (*http_server)->start();
  spdlog::info("serving {} on http://{}:{}/v1 (context {}, tool calls: {})", id, args.host,
               (*http_server)->port(), backend->context_length(),
               text::tool_call_format_name(backend->tool_call_format()));
  int sig = (*http_server)->wait_for_shutdown_signal();
  spdlog::info("{}: shutting down", sig != 0 ? strsignal(sig) : "stopped");
  backend->shutdown();
  return kExitOk;
}

}  // namespace

Verb add_serve_verb(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve a model over OpenAI/Anthropic-compatible HTTP");
  cmd->add_option("model", args->model,
                  "Model: a path, a repo id or a query over downloaded models (default: the "
                  "newest downloaded model, else the starter model)");
  cmd->add_option("--model", args->model_flag, "Same as the positional model (wins over it)");
  cmd->add_option("--host", args->host, "Interface to bind")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on every route "
                  "but /health");
  cmd->add_option("--http-threads", args->http_threads, "Threads serving HTTP I/O")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads for the model (0: every core)")
      ->capture_default_str();
  add_device_flags(cmd, args->device);
  cmd->add_option("--gpu-memory-utilization", args->gpu_memory_utilization,
                  "Share of the device's memory (RAM on CPU) for weights + KV + headroom when "
                  "the KV pool is sized automatically (0: 0.9 on a GPU, 0.5 on CPU)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--batch,--decode-concurrency", args->batch,
                  "Max requests decoded together (1 = strict serial)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--kv-budget", args->kv_budget_gb, "KV cache size in GB (0: automatic)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--prompt-cache", args->prompt_cache_gb,
                  "Cap in GB on idle cached prefix KV (0 disables the prefix cache)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--paged-kv-block-size", args->block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-model-len", args->max_model_len,
                  "Context length in tokens (0: the model's max_position_embeddings)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature,--temp", args->temperature, "Default temperature")
      ->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--top-p", args->top_p, "Default top-p")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", args->top_k, "Default top-k (0: off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-tokens", args->max_tokens,
                  "Default completion cap (default: the rest of the context)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--thinking", args->thinking,
                  "Default for the chat template's enable_thinking (a request's "
                  "chat_template_kwargs wins)")
      ->check(CLI::IsMember({"true", "false"}));
  return Verb{cmd, [args] { return run_serve(*args); }};
}

}  // namespace hearth::cli
