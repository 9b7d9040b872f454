// Engine: the thread loop is "drain the queue, step the scheduler"; it sleeps only when the
// scheduler has nothing to run. Stats are copied out under the lock after every step.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/hash.h"
#include "base/log.h"

namespace hearth::engine {

Result<SchedulerOptions> plan_scheduler(const Model& model, const EngineOptions& options) {
  const ModelConfig& config = model.config();
  SchedulerOptions s;
  if (options.max_batch < 1) return invalid_argument_error("--batch must be >= 1");
  if (options.block_size < 1 || options.block_size > 4096) {
    return invalid_argument_error("--paged-kv-block-size must be in [1, 4096], got {}",
                                  options.block_size);
  }
  if (options.kv_budget_gb < 0) return invalid_argument_error("--kv-budget must be >= 0");
  if (options.max_batched_tokens < 0) return invalid_argument_error("token budget must be >= 0");
  s.max_running = options.max_batch;
  // A GPU model reports its device memory; its steps want more tokens, a large card's more
  // still (see kDefaultGpuBatchedTokens).
  const std::optional<DeviceMemoryUsage> model_device = model.device_memory();
  int default_budget = kDefaultCpuBatchedTokens;
  if (model_device) {
    default_budget = model_device->total_bytes >= kLargeGpuBytes ? kDefaultLargeGpuBatchedTokens
                                                                 : kDefaultGpuBatchedTokens;
  }
  s.max_batched_tokens = options.max_batched_tokens > 0
                             ? options.max_batched_tokens
                             : std::max(default_budget, options.max_batch);
  s.block_size = options.block_size;
  s.max_context = options.max_context > 0 ? options.max_context : config.max_position_embeddings;
  s.eos_ids = options.eos_ids.empty() ? config.generation.eos_token_ids : options.eos_ids;
  s.vocab_size = config.vocab_size;
  s.cache_namespace =
      xxh3_64(options.cache_namespace.empty() ? model.describe() : options.cache_namespace);

  double block_bytes = static_cast<double>(model.kv_bytes_per_block(options.block_size));
  if (block_bytes <= 0) return internal_error("the model reports 0 KV bytes per block");
  if (options.memory_budget_gb < 0) return invalid_argument_error("--memory-budget must be >= 0");
  if (options.gpu_memory_utilization < 0 || options.gpu_memory_utilization > 1) {
    return invalid_argument_error("--gpu-memory-utilization must be in (0, 1], got {}",
                                  options.gpu_memory_utilization);
  }
  if (options.num_blocks > 0) {
    s.num_blocks = options.num_blocks;
  } else {
    kv::KvMemoryInputs in;
    // A GPU model reports its device's memory after the weights (free = what its budget
    // still allows); a CPU model lives in this machine's RAM.
    const bool on_device = options.device_memory.has_value() || model_device.has_value();
    if (options.device_memory) {
      in.device = *options.device_memory;
    } else if (model_device) {
      in.device = kv::DeviceMemory{model_device->total_bytes, model_device->free_bytes};
    } else {
      HEARTH_ASSIGN_OR_RETURN(in.device, kv::system_memory());
    }
    in.weight_bytes = model.weight_bytes();
    in.block_bytes = static_cast<uint64_t>(block_bytes);
    in.headroom_bytes = options.headroom_gb >= 0
                            ? static_cast<uint64_t>(options.headroom_gb * 1e9)
                            : estimate_headroom_bytes(config, s.max_batched_tokens, s.max_running);
    in.utilization = options.gpu_memory_utilization > 0 ? options.gpu_memory_utilization
                     : on_device                        ? kDefaultGpuMemoryUtilization
                                                        : kDefaultCpuMemoryUtilization;
    // A positive budget never rounds down to 0 ("automatic").
    auto bytes = [](double gb) {
      return gb > 0 ? std::max<uint64_t>(1, static_cast<uint64_t>(gb * 1e9)) : 0;
    };
    in.memory_budget_bytes = bytes(options.memory_budget_gb);
    in.kv_budget_bytes = bytes(options.kv_budget_gb);
    int64_t per_sequence = (std::max(s.max_context, 1) + s.block_size - 1) / s.block_size;
    in.wanted_blocks = per_sequence * s.max_running;
    HEARTH_ASSIGN_OR_RETURN(kv::KvMemoryPlan plan, kv::plan_kv_memory(in));
    s.num_blocks = plan.num_blocks;
    spdlog::info(
        "KV pool: {} blocks of {} tokens, {:.3f} GB (limited by {}); weights {:.3f} GB, "
        "headroom {:.3f} GB",
        plan.num_blocks, s.block_size, static_cast<double>(plan.kv_bytes) * 1e-9, plan.limited_by,
        static_cast<double>(in.weight_bytes) * 1e-9, static_cast<double>(in.headroom_bytes) * 1e-9);
  }
  if (options.prompt_cache_gb < 0) {
    s.max_idle_cached_blocks = -1;
  } else {
    s.max_idle_cached_blocks =
        static_cast<int64_t>(std::floor(options.prompt_cache_gb * 1e9 / block_bytes));
  }
  return s;
}

uint64_t estimate_headroom_bytes(const ModelConfig& c, int tokens, int logit_rows) {
  // Per token: x and h [hidden], q and attn [q_dim], k and v [kv_dim], gate and up [inter].
  uint64_t per_token = 2ull * (static_cast<uint64_t>(c.hidden_size) + c.q_dim() + c.kv_dim() +
                               static_cast<uint64_t>(c.intermediate_size));
  // Logits twice: the model's output and the rows the sampler works on.
  uint64_t logits = 2ull * static_cast<uint64_t>(logit_rows) * static_cast<uint64_t>(c.vocab_size);
  return (per_token * static_cast<uint64_t>(tokens) + logits) * sizeof(float) + (64ull << 20);
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Model> model,
                                               const EngineOptions& options) {
  if (!model) return invalid_argument_error("no model");
  HEARTH_ASSIGN_OR_RETURN(SchedulerOptions s, plan_scheduler(*model, options));
  HEARTH_RETURN_IF_ERROR(
      model->create_kv_cache(s.num_blocks, s.block_size).with_context("allocating the KV pool"));
  if (options.warm_up) {
    // Only speed is at stake: a warm-up that fails (no memory for its scratch) leaves the
    // shapes to be met on first use.
    if (Status warmed = model->warm_up(s.max_batched_tokens, s.max_running); !warmed.ok()) {
      spdlog::warn("engine: step-shape warm-up skipped: {}", warmed.message());
    }
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(model), s));
  engine->thread_ = std::thread([e = engine.get()] { e->run(); });
  return engine;
}

Engine::Engine(std::unique_ptr<Model> model, const SchedulerOptions& options)
    : model_(std::move(model)), scheduler_options_(options), scheduler_(options) {
  stats_ = scheduler_.stats();
}

Engine::~Engine() { shutdown(); }

Result<RequestId> Engine::submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                 std::shared_ptr<RequestSink> sink) {
  HEARTH_RETURN_IF_ERROR(scheduler_.check_admissible(prompt, params));
  RequestId id = next_id_.fetch_add(1);
  auto request = std::make_unique<Request>(id, std::move(prompt), params, std::move(sink));
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return unavailable_error("the engine is shut down");
    incoming_.push_back(std::move(request));
  }
  wake_.notify_one();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  EngineStats s = stats_;
  if (s.running == 0 && s.waiting == 0) {  // idle: the last window's rates are history
    s.prompt_tokens_per_s = 0;
    s.generation_tokens_per_s = 0;
  }
  return s;
}

void Engine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  // Concurrent callers (a signal handler's thread and a destructor) all return once joined.
  std::call_once(join_once_, [this] {
    if (thread_.joinable()) thread_.join();
  });
}

void Engine::run() {
  std::vector<std::unique_ptr<Request>> incoming;
  std::vector<RequestId> cancels;
  while (true) {
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !cancels_.empty() || scheduler_.has_work();
      });
      stopping = stopping_;
      incoming.swap(incoming_);
      cancels.swap(cancels_);
    }
    for (auto& request : incoming) scheduler_.add(std::move(request));
    incoming.clear();
    for (RequestId id : cancels) scheduler_.cancel(id);
    cancels.clear();
    if (stopping) {
      scheduler_.abort_all(FinishReason::kCancelled, cancelled_error("the engine shut down"));
      std::lock_guard lock(mutex_);
      stats_ = scheduler_.stats();
      return;
    }
    if (scheduler_.has_work()) {
      Status status = scheduler_.step(*model_);
      if (!status.ok()) spdlog::error("engine step failed: {}", status.to_string());
    }
    EngineStats snapshot = scheduler_.stats();
    std::lock_guard lock(mutex_);
    stats_ = snapshot;
  }
}

}  // namespace hearth::engine
