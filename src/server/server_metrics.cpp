// Rendering of ServerMetrics.
#include "server/server_metrics.h"

#include <fmt/format.h>

namespace hearth::server {

nlohmann::json metrics_json(const ServerMetrics& m) {
  auto avg_ms = [](int64_t total_us, int64_t count) {
    return count > 0 ? static_cast<double>(total_us) / count / 1000.0 : 0.0;
  };
  return {{"requests_total", m.requests_total.load()},
          {"requests_active", m.requests_active.load()},
          {"requests_failed", m.requests_failed.load()},
          {"requests_cancelled", m.requests_cancelled.load()},
          {"prompt_tokens_total", m.prompt_tokens_total.load()},
          {"cached_tokens_total", m.cached_tokens_total.load()},
          {"completion_tokens_total", m.completion_tokens_total.load()},
          {"mean_ttft_ms", avg_ms(m.ttft_us_total.load(), m.ttft_count.load())},
          {"mean_latency_ms", avg_ms(m.latency_us_total.load(), m.latency_count.load())}};
}

std::string metrics_prometheus(const ServerMetrics& m, const nlohmann::json& engine_stats,
                               int64_t connections_open) {
  std::string out;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, v);
  };
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, v);
  };
  counter("hearth_requests_total", "Generation requests accepted.", m.requests_total.load());
  counter("hearth_requests_failed_total", "Generation requests answered with an error.",
          m.requests_failed.load());
  counter("hearth_requests_cancelled_total", "Generation requests cancelled by the client.",
          m.requests_cancelled.load());
  counter("hearth_prompt_tokens_total", "Prompt tokens processed.", m.prompt_tokens_total.load());
  counter("hearth_cached_prompt_tokens_total", "Prompt tokens served from the prefix cache.",
          m.cached_tokens_total.load());
  counter("hearth_completion_tokens_total", "Tokens generated.", m.completion_tokens_total.load());
  counter("hearth_ttft_microseconds_sum", "Summed time to first token.", m.ttft_us_total.load());
  counter("hearth_ttft_count", "Requests that produced a first token.", m.ttft_count.load());
  gauge("hearth_requests_active", "Generation requests in flight.",
        static_cast<double>(m.requests_active.load()));
  gauge("hearth_http_connections_open", "Open HTTP connections.",
        static_cast<double>(connections_open));
  if (engine_stats.is_object()) {
    for (const auto& [key, value] : engine_stats.items()) {
      if (value.is_number()) {
        gauge("hearth_engine_" + key, "Engine statistic " + key + ".", value.get<double>());
      }
    }
  }
  return out;
}

}  // namespace hearth::server
