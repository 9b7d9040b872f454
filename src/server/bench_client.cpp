// Serving benchmark: one client thread per concurrent stream (the client side may spend
// threads; the server under test must not), raw HTTP/1.1 over Asio, SSE events timed as
// they arrive. Each request's prompt starts with a distinct token so no prefix is shared.
#include "server/bench_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/clock.h"

namespace hearth::server {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

struct Target {
  std::string host;
  std::string port;
};

Result<Target> parse_url(std::string url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return invalid_argument_error("--url must start with http:// (got '{}')", url);
  }
  url = url.substr(kScheme.size());
  auto slash = url.find('/');
  std::string hostport = url.substr(0, slash);
  Target t;
  auto colon = hostport.rfind(':');
  if (colon == std::string::npos) {
    t.host = hostport;
    t.port = "80";
  } else {
    t.host = hostport.substr(0, colon);
    t.port = hostport.substr(colon + 1);
  }
  if (t.host.empty()) return invalid_argument_error("--url has no host");
  return t;
}

struct Sample {
  bool ok = false;
  std::string error;
  double ttft_ms = 0;
  std::vector<double> itl_ms;
  int tokens = 0;
};

Sample one_request(const Target& target, const ServingBenchOptions& o, int index) {
  Sample s;
  nlohmann::json prompt = nlohmann::json::array();
  // Distinct first token per request: no prefix-cache sharing between requests.
  prompt.push_back(1000 + index % 20000);
  for (int i = 1; i < o.prompt_tokens; ++i) prompt.push_back(500 + (i * 7919 + index) % 3000);
  nlohmann::json body = {{"prompt", prompt}, {"max_tokens", o.tokens}, {"ignore_eos", true},
                         {"temperature", 0}, {"stream", true},         {"model", o.model}};
  std::string payload = body.dump();
  std::string req = fmt::format(
      "POST /v1/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\nConnection: close\r\n{}\r\n{}",
      target.host, payload.size(),
      o.api_key.empty() ? "" : fmt::format("Authorization: Bearer {}\r\n", o.api_key), payload);
  try {
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    tcp::socket socket(ioc);
    net::connect(socket, resolver.resolve(target.host, target.port));
    socket.set_option(tcp::no_delay(true));
    int64_t t0 = monotonic_ns();
    net::write(socket, net::buffer(req));
    std::string data;
    std::size_t scanned = 0;
    int64_t last = 0;
    char buf[16384];
    boost::system::error_code ec;
    while (true) {
      std::size_t n = socket.read_some(net::buffer(buf), ec);
      int64_t now = monotonic_ns();
      if (n > 0) data.append(buf, n);
      // Each token event is a completion chunk whose finish_reason is still null.
      std::size_t pos;
      while ((pos = data.find("\"finish_reason\":null", scanned)) != std::string::npos) {
        scanned = pos + 1;
        if (s.tokens == 0) {
          s.ttft_ms = static_cast<double>(now - t0) / 1e6;
        } else {
          s.itl_ms.push_back(static_cast<double>(now - last) / 1e6);
        }
        last = now;
        ++s.tokens;
      }
      if (ec) break;
    }
    if (data.rfind("HTTP/1.1 200", 0) != 0) {
      auto body_at = data.find("\r\n\r\n");
      s.error = data.substr(
          0,
          std::min<std::size_t>(data.size(), body_at == std::string::npos ? 200 : body_at + 200));
      return s;
    }
    s.ok = data.find("[DONE]") != std::string::npos;
    if (!s.ok) s.error = "stream ended without [DONE]";
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  return s;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

Result<std::vector<ServingBenchLevel>> run_serving_benchmark(const ServingBenchOptions& o) {
  HEARTH_ASSIGN_OR_RETURN(Target target, parse_url(o.url));
  if (o.concurrency.empty()) return invalid_argument_error("--concurrency needs a level");
  if (o.prompt_tokens < 1 || o.tokens < 1) {
    return invalid_argument_error("--prompt-tokens and --tokens must be >= 1");
  }
  std::vector<ServingBenchLevel> levels;
  int index = 0;
  for (int c : o.concurrency) {
    if (c < 1) return invalid_argument_error("--concurrency levels must be >= 1, got {}", c);
    ServingBenchLevel level;
    level.concurrency = c;
    level.requests = o.requests > 0 ? o.requests : std::max(8, 4 * c);
    std::vector<Sample> samples(level.requests);
    std::atomic<int> next{0};
    int base = index;
    index += level.requests;
    int64_t t0 = monotonic_ns();
    std::vector<std::thread> workers;
    for (int w = 0; w < c; ++w) {
      workers.emplace_back([&] {
        for (int i = next++; i < level.requests; i = next++) {
          samples[i] = one_request(target, o, base + i);
        }
      });
    }
    for (auto& t : workers) t.join();
    level.wall_s = static_cast<double>(monotonic_ns() - t0) / 1e9;
    std::vector<double> ttft, itl;
    for (const auto& s : samples) {
      if (!s.ok) {
        ++level.failed;
        if (level.first_error.empty()) level.first_error = s.error;
        continue;
      }
      ttft.push_back(s.ttft_ms);
      itl.insert(itl.end(), s.itl_ms.begin(), s.itl_ms.end());
      level.completion_tokens += s.tokens;
    }
    level.throughput_tok_s = static_cast<double>(level.completion_tokens) / level.wall_s;
    level.ttft_p50_ms = percentile(ttft, 0.5);
    level.ttft_p99_ms = percentile(ttft, 0.99);
    level.itl_p50_ms = percentile(itl, 0.5);
    level.itl_p99_ms = percentile(itl, 0.99);
    levels.push_back(std::move(level));
  }
  return levels;
}

std::string format_serving_benchmark(const ServingBenchOptions& o,
                                     const std::vector<ServingBenchLevel>& levels, bool json) {
  if (json) {
    nlohmann::json out = {{"url", o.url},
                          {"prompt_tokens", o.prompt_tokens},
                          {"tokens", o.tokens},
                          {"levels", nlohmann::json::array()}};
    for (const auto& l : levels) {
      out["levels"].push_back({{"concurrency", l.concurrency},
                               {"requests", l.requests},
                               {"failed", l.failed},
                               {"wall_s", l.wall_s},
                               {"completion_tokens", l.completion_tokens},
                               {"throughput_tok_s", l.throughput_tok_s},
                               {"ttft_ms", {{"p50", l.ttft_p50_ms}, {"p99", l.ttft_p99_ms}}},
                               {"itl_ms", {{"p50", l.itl_p50_ms}, {"p99", l.itl_p99_ms}}}});
    }
    return out.dump(2) + "\n";
  }
  std::string s = fmt::format("serving benchmark: {}  prompt {} tokens, {} generated per request\n",
                              o.url, o.prompt_tokens, o.tokens);
  s += fmt::format("{:>11} {:>8} {:>6} {:>12} {:>10} {:>10} {:>9} {:>9}\n", "concurrency",
                   "requests", "failed", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99");
  for (const auto& l : levels) {
    s += fmt::format("{:>11} {:>8} {:>6} {:>12.1f} {:>8.1f}ms {:>8.1f}ms {:>7.2f}ms {:>7.2f}ms\n",
                     l.concurrency, l.requests, l.failed, l.throughput_tok_s, l.ttft_p50_ms,
                     l.ttft_p99_ms, l.itl_p50_ms, l.itl_p99_ms);
  }
  for (const auto& l : levels) {
    if (!l.first_error.empty()) {
      s += fmt::format("concurrency {}: first error: {}\n", l.concurrency, l.first_error);
    }
  }
  return s;
}

int run_serving_benchmark_cli(const ServingBenchOptions& options, bool json) {
  auto levels = run_serving_benchmark(options);
  if (!levels.ok()) {
    std::fprintf(stderr, "hearth benchmark: %s\n", levels.status().message().c_str());
    return 1;
  }
  std::fputs(format_serving_benchmark(options, *levels, json).c_str(), stdout);
  for (const auto& l : *levels) {
    if (l.failed > 0) return 1;
  }
  return 0;
}

}  // namespace hearth::server
