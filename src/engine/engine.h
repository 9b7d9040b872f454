// Engine: one thread that owns the model and its KV, fed by a thread-safe submission queue.
// Any thread may submit, cancel and read stats; tokens and finishes come back through each
// request's RequestSink on the engine thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/engine_stats.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "kv/memory_plan.h"
#include "models/model.h"

namespace hearth::engine {

struct EngineOptions {
  int max_batch = 8;  // --batch: running sequences; 1 = strict serial FIFO
  // Tokens per forward pass; 0 = max(kDefaultGpuBatchedTokens, max_batch) for a model on a
  // GPU (kDefaultLargeGpuBatchedTokens on one of kLargeGpuBytes or more),
  // max(kDefaultCpuBatchedTokens, max_batch) on CPU.
  int max_batched_tokens = 0;
  int block_size = 16;           // --paged-kv-block-size
  double kv_budget_gb = 0;       // --kv-budget (decimal GB); 0 = automatic
  double prompt_cache_gb = -1;   // --prompt-cache: cap on idle cached KV; -1 none, 0 off
  int num_blocks = 0;            // explicit pool size in blocks (overrides kv_budget_gb)
  std::string cache_namespace;   // model fingerprint + adapter + KV scheme
  std::vector<int32_t> eos_ids;  // empty: the model's generation_config EOS ids
  int max_context = 0;           // 0: the model's max_position_embeddings
  // --memory-budget (decimal GB): cap on weights + KV + activation headroom; 0 = no cap.
  double memory_budget_gb = 0;
  // --gpu-memory-utilization: share of the device's memory (RAM on CPU) the process may
  // use for weights + KV + headroom when the pool is sized automatically; 0 = the default
  // (kDefaultGpuMemoryUtilization on a GPU, kDefaultCpuMemoryUtilization on CPU).
  double gpu_memory_utilization = 0;
  // The KV pool's device memory after the weights are loaded. A GPU backend fills it
  // (cudaMemGetInfo); unset = the CPU backend, sized from this machine's RAM.
  std::optional<kv::DeviceMemory> device_memory;
  // Bytes (decimal GB) kept out of the KV pool for activations, workspaces and logits;
  // < 0 = estimated from the model shape and the token budget (estimate_headroom_bytes).
  double headroom_gb = -1;
  // Meet the step shapes ahead of need before the first step (Model::warm_up: on CUDA, one
  // GEMM per weight shape at a ladder of row counts, ~0.5 s for an 8B model on the H200).
  // `generate`, which runs one request, turns it off. A failed warm-up only logs a warning.
  bool warm_up = true;
};

// Step token budgets. On a GPU a step's cost is flat until its GEMMs turn compute-bound, and
// cuBLASLt reaches most of the bf16 GEMM rate only from m ~ 2048 rows (benchmarks/RESULTS.md,
// "engine step budget"): on a smaller card 2048 prefill tokens cost little more per token than
// 8192 and keep a mixed step's decode rows waiting ~4x less. A card of 70 GiB or more (H100,
// H200: vLLM's tier for its 8192 server default) takes 8192: on the H200 it measured +15-20 %
// aggregate decode at 64 and 256 concurrent requests. On CPU a step is linear in tokens already.
inline constexpr int kDefaultGpuBatchedTokens = 2048;
inline constexpr int kDefaultLargeGpuBatchedTokens = 8192;
inline constexpr uint64_t kLargeGpuBytes = 70ull << 30;
inline constexpr int kDefaultCpuBatchedTokens = 512;
inline constexpr double kDefaultGpuMemoryUtilization = 0.9;
inline constexpr double kDefaultCpuMemoryUtilization = 0.5;

class Engine {
 public:
  // Sizes the KV pool, allocates it in the model and starts the engine thread.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Model> model,
                                                const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors (bad params, prompt + max_tokens over the context or over the
  // whole KV budget, engine shut down) come back here and the sink is never called.
  Result<RequestId> submit(std::vector<int32_t> prompt, const SamplingParams& params,
                           std::shared_ptr<RequestSink> sink);
  // Cancels a queued or running request; its sink gets on_finish(kCancelled) and its blocks
  // are freed at the next step. Unknown or finished ids are ignored.
  void cancel(RequestId id);
  EngineStats stats() const;
  // Finishes outstanding requests as cancelled and joins the engine thread. Idempotent.
  void shutdown();

  const Model& model() const { return *model_; }
  const SchedulerOptions& scheduler_options() const { return scheduler_options_; }

 private:
  Engine(std::unique_ptr<Model> model, const SchedulerOptions& options);
  void run();

  std::unique_ptr<Model> model_;
  SchedulerOptions scheduler_options_;
  Scheduler scheduler_;  // engine thread only

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Request>> incoming_;  // guarded by mutex_
  std::vector<RequestId> cancels_;                  // guarded by mutex_
  bool stopping_ = false;                           // guarded by mutex_
  EngineStats stats_;                               // guarded by mutex_
  std::atomic<RequestId> next_id_{1};
  std::thread thread_;
  std::once_flag join_once_;
};

// Sizes the pool: explicit num_blocks; else kv_budget_gb (checked against free memory and
// the memory budget); else enough for max_batch full-context sequences, capped by free
// memory, the utilization share and the memory budget (kv::plan_kv_memory). Errors name
// the flag that cannot be met.
Result<SchedulerOptions> plan_scheduler(const Model& model, const EngineOptions& options);

// The CPU forward's activation memory for a step of `tokens` tokens and `logit_rows` logit
// rows (hidden states, q/k/v, attention output, MLP, logits, plus a fixed 64 MiB margin):
// what automatic KV sizing keeps free unless EngineOptions::headroom_gb says otherwise.
uint64_t estimate_headroom_bytes(const ModelConfig& config, int tokens, int logit_rows);

}  // namespace hearth::engine
