// Request counters behind /stats (JSON) and /metrics (Prometheus text exposition).
// Lock-free counters bumped from I/O and engine threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace hearth::server {

struct ServerMetrics {
  std::atomic<int64_t> requests_total{0};      // generation requests accepted
  std::atomic<int64_t> requests_active{0};     // generation requests in flight
  std::atomic<int64_t> requests_failed{0};     // 4xx/5xx on generation routes
  std::atomic<int64_t> requests_cancelled{0};  // client went away mid-request
  std::atomic<int64_t> prompt_tokens_total{0};
  std::atomic<int64_t> cached_tokens_total{0};
  std::atomic<int64_t> completion_tokens_total{0};
  std::atomic<int64_t> ttft_us_total{0};  // summed time to first token
  std::atomic<int64_t> ttft_count{0};
  std::atomic<int64_t> latency_us_total{0};  // summed whole-request latency
  std::atomic<int64_t> latency_count{0};
  int64_t started_unix = 0;
};

nlohmann::json metrics_json(const ServerMetrics& m);
// Prometheus text format; `extra` adds gauges as name -> value.
std::string metrics_prometheus(const ServerMetrics& m, const nlohmann::json& engine_stats,
                               int64_t connections_open);

}  // namespace hearth::server
