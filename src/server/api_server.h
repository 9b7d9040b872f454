// The route table of `hearth serve`: authentication, CORS, and every endpoint (OpenAI,
// Anthropic and Responses generation, models, health, stats, metrics, tokenize). It owns
// nothing about sockets; HttpServer hands it requests and it answers on the Exchange.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/generation_job.h"
#include "server/http_server.h"
#include "server/model_backend.h"
#include "server/server_metrics.h"

namespace hearth::server {

struct ApiServerOptions {
  std::string api_key;  // empty: no authentication
  GenerationDefaults defaults;
};

class ApiServer {
 public:
  // `models` must be non-empty; the first is the default a request's unknown `model` rides.
  ApiServer(std::vector<std::shared_ptr<ModelBackend>> models, ApiServerOptions options);

  void handle(HttpRequest request, std::shared_ptr<Exchange> exchange);
  // Lets /stats and /metrics report connection counts.
  void set_http_server(const HttpServer* http) { http_ = http; }

  const ServerMetrics& metrics() const { return *metrics_; }

 private:
  std::shared_ptr<ModelBackend> pick_model(const std::string& name) const;
  bool authorized(const HttpRequest& request) const;
  HttpResponse models_response() const;
  HttpResponse stats_response() const;
  HttpResponse health_response() const;
  void generation(ApiKind kind, const HttpRequest& request, std::shared_ptr<Exchange> exchange);
  HttpResponse tokenize(const HttpRequest& request) const;
  HttpResponse detokenize(const HttpRequest& request) const;
  HttpResponse count_tokens(const HttpRequest& request) const;

  std::vector<std::shared_ptr<ModelBackend>> models_;
  ApiServerOptions options_;
  std::shared_ptr<ServerMetrics> metrics_;
  const HttpServer* http_ = nullptr;
};

}  // namespace hearth::server
