// plan_kv_memory: every cap is turned into "bytes left for KV" (never negative), the
// smallest wins and names itself, so a user who sees the log knows which flag to move.
#include "kv/memory_plan.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

namespace hearth::kv {
namespace {

double gb(uint64_t bytes) { return static_cast<double>(bytes) * 1e-9; }

// a - b, or 0 when b >= a.
uint64_t left(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

Result<DeviceMemory> system_memory() {
  std::ifstream in("/proc/meminfo");
  if (!in) return io_error("cannot read /proc/meminfo");
  DeviceMemory m;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    fields >> key >> kib;
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.free_bytes = kib * 1024;
  }
  if (m.total_bytes == 0 || m.free_bytes == 0) {
    return parse_error("/proc/meminfo has no MemTotal / MemAvailable");
  }
  return m;
}

Result<KvMemoryPlan> plan_kv_memory(const KvMemoryInputs& in) {
  if (in.block_bytes == 0) return internal_error("KV blocks of 0 bytes");
  if (!(in.utilization > 0.0 && in.utilization <= 1.0)) {
    return invalid_argument_error("--gpu-memory-utilization must be in (0, 1], got {}",
                                  in.utilization);
  }
  const uint64_t fixed = in.weight_bytes + in.headroom_bytes;
  if (in.memory_budget_bytes > 0 && fixed >= in.memory_budget_bytes) {
    return invalid_argument_error(
        "--memory-budget {:.3f} GB cannot hold the weights ({:.3f} GB) plus {:.3f} GB of "
        "activation headroom, let alone a KV cache",
        gb(in.memory_budget_bytes), gb(in.weight_bytes), gb(in.headroom_bytes));
  }
  const uint64_t free_for_kv = left(in.device.free_bytes, in.headroom_bytes);

  KvMemoryPlan plan;
  if (in.kv_budget_bytes > 0) {
    if (in.memory_budget_bytes > 0 && fixed + in.kv_budget_bytes > in.memory_budget_bytes) {
      return invalid_argument_error(
          "--kv-budget {:.3f} GB plus the weights ({:.3f} GB) and activation headroom "
          "({:.3f} GB) exceeds --memory-budget {:.3f} GB",
          gb(in.kv_budget_bytes), gb(in.weight_bytes), gb(in.headroom_bytes),
          gb(in.memory_budget_bytes));
    }
    if (in.device.total_bytes > 0 && in.kv_budget_bytes > free_for_kv) {
      return out_of_memory_error(
          "--kv-budget {:.3f} GB does not fit: {:.3f} GB free after the weights, less "
          "{:.3f} GB of activation headroom",
          gb(in.kv_budget_bytes), gb(in.device.free_bytes), gb(in.headroom_bytes));
    }
    plan.num_blocks = static_cast<int>(
        std::min<uint64_t>(in.kv_budget_bytes / in.block_bytes, std::numeric_limits<int>::max()));
    plan.limited_by = "--kv-budget";
    if (plan.num_blocks < 1) {
      return invalid_argument_error("--kv-budget {:.9f} GB holds no KV block ({} bytes each)",
                                    gb(in.kv_budget_bytes), in.block_bytes);
    }
  } else {
    struct Cap {
      uint64_t bytes;
      std::string name;
    };
    std::vector<Cap> caps;
    if (in.device.total_bytes > 0) {
      caps.push_back({free_for_kv, "free memory"});
      auto usable =
          static_cast<uint64_t>(static_cast<double>(in.device.total_bytes) * in.utilization);
      caps.push_back({left(usable, fixed), "memory utilization"});
    }
    if (in.memory_budget_bytes > 0) {
      caps.push_back({in.memory_budget_bytes - fixed, "--memory-budget"});
    }
    if (in.wanted_blocks > 0) {
      uint64_t wanted = static_cast<uint64_t>(in.wanted_blocks);
      caps.push_back({wanted > std::numeric_limits<uint64_t>::max() / in.block_bytes
                          ? std::numeric_limits<uint64_t>::max()
                          : wanted * in.block_bytes,
                      "--batch full-context sequences"});
    }
    if (caps.empty()) return invalid_argument_error("no memory figure to size the KV pool from");
    const Cap& smallest = *std::min_element(
        caps.begin(), caps.end(), [](const Cap& a, const Cap& b) { return a.bytes < b.bytes; });
    plan.num_blocks = static_cast<int>(
        std::min<uint64_t>(smallest.bytes / in.block_bytes, std::numeric_limits<int>::max()));
    plan.limited_by = smallest.name;
    if (plan.num_blocks < 1) {
      return out_of_memory_error(
          "no room for a KV cache (limited by {}): {:.3f} GB total, {:.3f} GB free, weights "
          "{:.3f} GB, activation headroom {:.3f} GB, one block {} bytes",
          smallest.name, gb(in.device.total_bytes), gb(in.device.free_bytes), gb(in.weight_bytes),
          gb(in.headroom_bytes), in.block_bytes);
    }
  }
  plan.kv_bytes = static_cast<uint64_t>(plan.num_blocks) * in.block_bytes;
  return plan;
}

}  // namespace hearth::kv
