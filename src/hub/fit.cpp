// Memory fit estimates (see fit.h).
#include "hub/fit.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace hearth::hub {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;
constexpr std::int64_t kPrefillChunk = 2048;  // tokens prefilled per step at most

std::optional<MemoryBudget> from_nvidia_smi() {
  FILE* pipe = popen(
      "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits 2>/dev/null", "r");
  if (pipe == nullptr) return std::nullopt;
  std::array<char, 512> line{};
  std::string first;
  if (std::fgets(line.data(), line.size(), pipe) != nullptr) first = line.data();
  pclose(pipe);
  auto comma = first.rfind(',');
  if (comma == std::string::npos) return std::nullopt;
  char* end = nullptr;
  double mib = std::strtod(first.c_str() + comma + 1, &end);
  if (end == first.c_str() + comma + 1 || mib <= 0) return std::nullopt;
  MemoryBudget budget;
  budget.gpu = true;
  budget.total = static_cast<std::uint64_t>(mib * 1024 * 1024);
  budget.bytes = budget.total / 10 * 9;
  budget.source = fmt::format("nvidia-smi: GPU 0 {}, 90% of its memory", first.substr(0, comma));
  return budget;
}

}  // namespace

Result<MemoryBudget> detect_memory_budget() {
  if (auto gpu = from_nvidia_smi()) return *gpu;
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0, total = 0, available = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") total = kb * 1024;
    if (key == "MemAvailable:") available = kb * 1024;
  }
  if (total == 0) return unavailable_error("cannot read the machine's memory from /proc/meminfo");
  MemoryBudget budget;
  budget.total = total;
  budget.bytes = available > 0 ? available : total;
  budget.source = "/proc/meminfo: RAM available now (no GPU found by nvidia-smi)";
  return budget;
}

FitEstimate estimate_fit(const ModelSummary& m, std::int64_t context, int batch,
                         const MemoryBudget& budget) {
  auto at = [&](std::int64_t ctx) {
    FitEstimate e;
    e.weights = m.weight_bytes;
    e.kv_per_token = 2ull * m.num_layers * m.num_kv_heads * m.head_dim * 2;  // K,V bf16
    e.kv = e.kv_per_token * static_cast<std::uint64_t>(ctx) * static_cast<std::uint64_t>(batch);
    // f32 per chunk token: residual + normed input, q/k/v, attention output, gate/up/act.
    std::uint64_t chunk = static_cast<std::uint64_t>(std::min(ctx * batch, kPrefillChunk));
    std::uint64_t per_token = 2ull * m.hidden_size + 1ull * m.num_heads * m.head_dim +
                              2ull * m.num_kv_heads * m.head_dim + m.hidden_size +
                              3ull * m.intermediate_size;
    e.activations = chunk * per_token * 4 + static_cast<std::uint64_t>(batch) * m.vocab_size * 4;
    e.overhead = budget.gpu ? kGiB : kGiB / 2;
    e.total = e.weights + e.kv + e.activations + e.overhead;
    e.fits = e.total <= budget.bytes;
    return e;
  };
  FitEstimate result = at(context);
  std::int64_t limit = m.context_length.value_or(std::max<std::int64_t>(context, 1 << 20));
  std::int64_t lo = 0, hi = limit;  // largest ctx in [0, limit] that fits
  while (lo < hi) {
    std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (at(mid).fits) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  result.max_context = lo;
  return result;
}

}  // namespace hearth::hub
