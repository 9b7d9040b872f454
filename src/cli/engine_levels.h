// `hearth benchmark --concurrency ...`: the engine-level half of the benchmark — aggregate
// throughput at several numbers of concurrent requests (engine::run_engine_benchmark) and
// the time to first token of a short suffix after a long cached prefix.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "models/model.h"

namespace hearth::cli {

struct EngineLevelsSpec {
  std::vector<int> concurrency;  // levels, each a run of that many requests submitted at once
  int prompt_tokens = 128;       // per request
  int tokens = 128;              // generated per request (EOS ignored)
  int prefix_tokens = 0;         // > 0: also time a suffix after a cached prefix this long
  int suffix_tokens = 16;
  int max_batched_tokens = 0;  // engine token budget per step; 0 = the engine's default
  double memory_budget_gb = 0;
  double gpu_memory_utilization = 0;
};

// Moves `model` into an engine sized for the largest level, runs every level and the
// prefix test; returns one JSON object ({"levels": [...], "prefix": {...}, "kv": ...}).
Result<nlohmann::json> run_engine_levels(std::unique_ptr<Model> model,
                                         const EngineLevelsSpec& spec);

// Human-readable lines for the object run_engine_levels returned.
std::string format_engine_levels(const nlohmann::json& report);

}  // namespace hearth::cli
