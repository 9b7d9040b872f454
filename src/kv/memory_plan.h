// How many KV blocks to carve at startup: the arithmetic that turns memory figures (device
// or RAM capacity and free bytes, resident weights, a headroom for activations) and the
// user's caps (--memory-budget, --kv-budget, --gpu-memory-utilization) into a block count,
// or a clear error when nothing fits. Pure, so every backend can supply its own numbers.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace hearth::kv {

// Memory of the device the KV pool lives on, as seen after the weights are resident.
struct DeviceMemory {
  uint64_t total_bytes = 0;  // capacity (CUDA: cudaMemGetInfo total; CPU: MemTotal)
  uint64_t free_bytes = 0;   // free now (CUDA: cudaMemGetInfo free; CPU: MemAvailable)
};

// This machine's RAM from /proc/meminfo (MemTotal, MemAvailable): the CPU backend's device.
Result<DeviceMemory> system_memory();

struct KvMemoryInputs {
  DeviceMemory device;
  uint64_t weight_bytes = 0;    // this model's resident weights (counted in the process total)
  uint64_t block_bytes = 0;     // KV bytes of one block, all layers, K and V
  uint64_t headroom_bytes = 0;  // kept out of the pool: activations, workspaces, logits
  // Share of device.total_bytes the whole process (weights + KV + headroom) may use, in
  // (0, 1] (vLLM's gpu_memory_utilization).
  double utilization = 0.9;
  uint64_t memory_budget_bytes = 0;  // --memory-budget: weights + KV + headroom; 0 = no cap
  uint64_t kv_budget_bytes = 0;      // --kv-budget: exact KV bytes; 0 = size automatically
  int64_t wanted_blocks = 0;         // automatic sizing needs no more than this; 0 = as many as fit
};

struct KvMemoryPlan {
  int num_blocks = 0;
  uint64_t kv_bytes = 0;   // num_blocks * block_bytes
  std::string limited_by;  // what set the size: "--kv-budget", "--memory-budget", ...
};

// Automatic: as many blocks as fit under every cap — free memory minus headroom,
// utilization x total minus weights and headroom, the memory budget minus weights and
// headroom — but no more than wanted_blocks. Explicit (kv_budget_bytes > 0): exactly that
// many bytes of blocks, an error if they exceed free memory or the memory budget. Errors
// name the flag to change.
Result<KvMemoryPlan> plan_kv_memory(const KvMemoryInputs& in);

}  // namespace hearth::kv
