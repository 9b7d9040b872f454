// `hearth fit`: will this model run here? Weights + KV cache + activations against the
// GPU's memory (nvidia-smi) or the machine's RAM, a verdict and the longest context that
// fits. An estimate, written out term by term so a user can check it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "hub/model_summary.h"

namespace hearth::hub {

struct MemoryBudget {
  std::uint64_t bytes = 0;  // what hearth may use
  std::uint64_t total = 0;  // the device's or machine's memory
  bool gpu = false;
  std::string source;  // how it was found: "nvidia-smi: NVIDIA H200 ...", "/proc/meminfo"
};

// The first GPU nvidia-smi reports (90% of its memory), else RAM (MemAvailable).
Result<MemoryBudget> detect_memory_budget();

struct FitEstimate {
  std::uint64_t weights = 0;
  std::uint64_t kv_per_token = 0;  // K and V of every layer, bf16
  std::uint64_t kv = 0;            // kv_per_token x context x batch
  std::uint64_t activations = 0;   // one prefill chunk's working set + logits
  std::uint64_t overhead = 0;      // runtime (CUDA context, workspaces) or process overhead
  std::uint64_t total = 0;
  bool fits = false;
  std::int64_t max_context = 0;  // longest context that fits at this batch (0: none)
};

FitEstimate estimate_fit(const ModelSummary& model, std::int64_t context, int batch,
                         const MemoryBudget& budget);

}  // namespace hearth::hub
