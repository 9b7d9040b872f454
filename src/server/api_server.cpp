// Routes, auth and CORS. Generation routes parse their body (errors name the field),
// then hand the request to run_generation; small routes answer inline.
#include "server/api_server.h"

#include <openssl/crypto.h>

#include <chrono>

#include "base/log.h"
#include "server/api_format.h"
#include "server/json_body.h"
#include "server/web_app.h"

namespace hearth::server {

using nlohmann::json;

namespace {

void add_cors(HttpResponse& r, const HttpRequest& req) {
  std::string origin = req.header("origin");
  r.headers.emplace_back("Access-Control-Allow-Origin", origin.empty() ? "*" : origin);
  if (!origin.empty()) r.headers.emplace_back("Vary", "Origin");
}

HttpResponse json_response(const json& body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

// Wraps an Exchange so that every response carries the CORS headers.
class CorsExchange : public Exchange {
 public:
  CorsExchange(std::shared_ptr<Exchange> inner, HttpRequest req)
      : inner_(std::move(inner)), origin_(req.header("origin")) {}
  void respond(HttpResponse r) override { inner_->respond(decorate(std::move(r))); }
  void begin_stream(HttpResponse head) override { inner_->begin_stream(decorate(std::move(head))); }
  void write(std::string bytes) override { inner_->write(std::move(bytes)); }
  void end() override { inner_->end(); }
  void on_cancel(std::function<void()> cb) override { inner_->on_cancel(std::move(cb)); }
  bool cancelled() const override { return inner_->cancelled(); }

 private:
  HttpResponse decorate(HttpResponse r) const {
    r.headers.emplace_back("Access-Control-Allow-Origin", origin_.empty() ? "*" : origin_);
    if (!origin_.empty()) r.headers.emplace_back("Vary", "Origin");
    return r;
  }
  std::shared_ptr<Exchange> inner_;
  std::string origin_;
};

bool is_anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

}  // namespace

ApiServer::ApiServer(std::vector<std::shared_ptr<ModelBackend>> models, ApiServerOptions options)
    : models_(std::move(models)),
      options_(std::move(options)),
      metrics_(std::make_shared<ServerMetrics>()) {
  metrics_->started_unix = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
}

std::shared_ptr<ModelBackend> ApiServer::pick_model(const std::string& name) const {
  for (const auto& m : models_) {
    if (m->id() == name) return m;
  }
  return models_.front();
}

bool ApiServer::authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  auto same = [&](const std::string& given) {
    return given.size() == options_.api_key.size() &&
           CRYPTO_memcmp(given.data(), options_.api_key.data(), given.size()) == 0;
  };
  std::string auth = req.header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
      same(auth.substr(kBearer.size()))) {
    return true;
  }
  std::string key = req.header("x-api-key");
  return !key.empty() && same(key);
}

HttpResponse ApiServer::health_response() const {
  return json_response({{"status", "ok"}, {"model", models_.front()->id()}});
}

HttpResponse ApiServer::models_response() const {
  json data = json::array();
  for (const auto& m : models_) {
    data.push_back({{"id", m->id()},
                    {"object", "model"},
                    {"created", m->created()},
                    {"owned_by", "hearth"},
                    {"max_model_len", m->context_length()},
                    // Anthropic's /v1/models fields, so its SDK's models.list() reads them.
                    {"type", "model"},
                    {"display_name", m->id()},
                    {"created_at", m->created()}});
  }
  return json_response({{"object", "list"},
                        {"data", data},
                        {"has_more", false},
                        {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
                        {"last_id", data.empty() ? json(nullptr) : data.back()["id"]}});
}

HttpResponse ApiServer::stats_response() const {
  json s = metrics_json(*metrics_);
  s["uptime_s"] = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count() -
                  metrics_->started_unix;
  if (http_) {
    auto hs = http_->stats();
    s["http"] = {{"connections_open", hs.connections_open},
                 {"connections_total", hs.connections_total},
                 {"requests_total", hs.requests_total}};
  }
  json models = json::array();
  for (const auto& m : models_) {
    models.push_back({{"id", m->id()},
                      {"context_length", m->context_length()},
                      {"tool_call_format", text::tool_call_format_name(m->tool_call_format())},
                      {"engine", m->stats()}});
  }
  s["models"] = models;
  return json_response(s);
}

HttpResponse ApiServer::tokenize(const HttpRequest& req) const {
  json body = parse_json_body(req.body);
  FieldReader f(body);
  auto model = pick_model(f.string("model").value_or(""));
  std::vector<int32_t> ids;
  if (f.has("messages")) {
    GenerationRequest g = parse_chat_completions(body);
    ids = render_prompt(g, *model, options_.defaults).ids;
  } else {
    auto text = f.string("prompt");
    if (!text) throw_invalid("Missing required parameter: 'prompt' (or 'messages').", "prompt");
    auto r = model->tokenize(*text, f.boolean("add_special_tokens").value_or(true));
    if (!r.ok()) throw ApiException{api_error_from_status(r.status())};
    ids = std::move(*r);
  }
  return json_response({{"tokens", ids},
                        {"count", ids.size()},
                        {"max_model_len", model->context_length()},
                        {"model", model->id()}});
}

HttpResponse ApiServer::detokenize(const HttpRequest& req) const {
  json body = parse_json_body(req.body);
  FieldReader f(body);
  auto model = pick_model(f.string("model").value_or(""));
  const json* tokens = f.array("tokens");
  if (!tokens) throw_invalid("Missing required parameter: 'tokens'.", "tokens");
  std::vector<int32_t> ids;
  for (std::size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model->vocab_size()) {
      throw_invalid(fmt::format("Invalid 'tokens[{}]': expected a token id in [0, {}).", i,
                                model->vocab_size()),
                    "tokens");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  auto text = model->detokenize(ids, f.boolean("skip_special_tokens").value_or(false));
  if (!text.ok()) throw ApiException{api_error_from_status(text.status())};
  return json_response({{"prompt", *text}, {"model", model->id()}});
}

HttpResponse ApiServer::count_tokens(const HttpRequest& req) const {
  json body = parse_json_body(req.body);
  // count_tokens takes a Messages body without max_tokens.
  if (!body.contains("max_tokens")) body["max_tokens"] = 1;
  GenerationRequest g = parse_messages(body);
  auto model = pick_model(g.model);
  auto ids = render_prompt(g, *model, options_.defaults).ids;
  return json_response({{"input_tokens", ids.size()}});
}

void ApiServer::generation(ApiKind kind, const HttpRequest& req,
                           std::shared_ptr<Exchange> exchange) {
  json body = parse_json_body(req.body);
  GenerationRequest g;
  switch (kind) {
    case ApiKind::kChatCompletions:
      g = parse_chat_completions(body);
      break;
    case ApiKind::kCompletions:
      g = parse_completions(body);
      break;
    case ApiKind::kMessages:
      g = parse_messages(body);
      break;
    case ApiKind::kResponses:
      g = parse_responses(body);
      break;
  }
  auto model = pick_model(g.model);
  run_generation(std::move(g), model, options_.defaults, std::move(exchange), metrics_);
}

void ApiServer::handle(HttpRequest req, std::shared_ptr<Exchange> raw_exchange) {
  ApiFlavor flavor = is_anthropic_path(req.path) ? ApiFlavor::kAnthropic : ApiFlavor::kOpenAI;
  if (req.method == "OPTIONS") {
    HttpResponse r;
    r.status = 204;
    r.content_type.clear();
    add_cors(r, req);
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    std::string asked = req.header("access-control-request-headers");
    r.headers.emplace_back("Access-Control-Allow-Headers",
                           asked.empty() ? "authorization, content-type, x-api-key, "
                                           "anthropic-version, anthropic-beta"
                                         : asked);
    r.headers.emplace_back("Access-Control-Max-Age", "86400");
    return raw_exchange->respond(std::move(r));
  }
  auto exchange = std::make_shared<CorsExchange>(std::move(raw_exchange), req);
  auto fail = [&](ApiError e) {
    spdlog::info("{} {} -> {}: {}", req.method, req.path, e.status, e.message);
    exchange->respond(render_error(e, flavor));
  };
  try {
    const std::string& p = req.path;
    bool get = req.method == "GET" || req.method == "HEAD";
    bool post = req.method == "POST";
    if (p == "/health" || p == "/v1/health") {
      if (!get) return fail({405, "invalid_request_error", "use GET /health", "", ""});
      return exchange->respond(health_response());
    }
    // The web app's page needs no key (it holds none); its API calls do.
    if (auto page = get ? web_app_response(p) : std::nullopt) {
      return exchange->respond(std::move(*page));
    }
    if (!authorized(req)) {
      return fail({401, "invalid_request_error",
                   "missing or invalid API key: send 'Authorization: Bearer <key>' or "
                   "'x-api-key: <key>'",
                   "", "invalid_api_key"});
    }
    struct Route {
      const char* path;
      ApiKind kind;
    };
    static constexpr Route kGenerationRoutes[] = {
        {"/v1/chat/completions", ApiKind::kChatCompletions},
        {"/v1/completions", ApiKind::kCompletions},
        {"/v1/messages", ApiKind::kMessages},
        {"/v1/responses", ApiKind::kResponses},
    };
    for (const auto& route : kGenerationRoutes) {
      if (p == route.path) {
        if (!post) {
          return fail({405, "invalid_request_error",
                       fmt::format("{} accepts POST only", route.path), "", ""});
        }
        return generation(route.kind, req, exchange);
      }
    }
    if (p == "/v1/messages/count_tokens" && post) return exchange->respond(count_tokens(req));
    if ((p == "/v1/models" || p == "/models") && get) return exchange->respond(models_response());
    if (p.rfind("/v1/models/", 0) == 0 && get) {
      std::string id = p.substr(std::string("/v1/models/").size());
      for (const auto& m : models_) {
        if (m->id() == id) {
          return exchange->respond(json_response({{"id", m->id()},
                                                  {"object", "model"},
                                                  {"created", m->created()},
                                                  {"owned_by", "hearth"}}));
        }
      }
      return fail({404, "not_found_error", fmt::format("model '{}' is not loaded", id), "model",
                   "model_not_found"});
    }
    if (p == "/stats" && get) return exchange->respond(stats_response());
    if (p == "/metrics" && get) {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_prometheus(*metrics_, models_.front()->stats(),
                                  http_ ? http_->stats().connections_open : 0);
      return exchange->respond(std::move(r));
    }
    if (p == "/tokenize" && post) return exchange->respond(tokenize(req));
    if (p == "/detokenize" && post) return exchange->respond(detokenize(req));
    return fail({404, "not_found_error", fmt::format("no route for {} {}", req.method, p), "", ""});
  } catch (const ApiException& e) {
    fail(e.error);
  } catch (const std::exception& e) {
    spdlog::error("internal error on {} {}: {}", req.method, req.path, e.what());
    fail({500, "api_error", std::string("internal error: ") + e.what(), "", ""});
  }
}

}  // namespace hearth::server
