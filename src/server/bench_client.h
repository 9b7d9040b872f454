// The serving benchmark client behind `hearth benchmark --url`: drives a running server's
// /v1/completions with streaming requests at several concurrency levels and reports time to
// first token, inter-token latency (p50 / p99) and aggregate throughput per level.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::server {

struct ServingBenchOptions {
  std::string url;               // "http://host:port" (a trailing /v1 is accepted)
  std::vector<int> concurrency;  // e.g. {1, 8, 32}
  int prompt_tokens = 128;       // exact: prompts are sent as token ids
  int tokens = 128;              // completion tokens per request (ignore_eos)
  int requests = 0;              // per level; 0: 4 x concurrency (at least 8)
  std::string api_key;
  std::string model;
};

struct ServingBenchLevel {
  int concurrency = 0;
  int requests = 0;
  int failed = 0;
  double wall_s = 0;
  int64_t completion_tokens = 0;
  double throughput_tok_s = 0;  // completion tokens / wall time
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;
  std::string first_error;
};

Result<std::vector<ServingBenchLevel>> run_serving_benchmark(const ServingBenchOptions& options);

// A table (or one JSON object when `json`) of the levels.
std::string format_serving_benchmark(const ServingBenchOptions& options,
                                     const std::vector<ServingBenchLevel>& levels, bool json);

// The verb's entry point for --url: runs, prints to stdout, returns a process exit code.
int run_serving_benchmark_cli(const ServingBenchOptions& options, bool json);

}  // namespace hearth::server
