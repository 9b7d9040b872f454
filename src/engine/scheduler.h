// Scheduler: the engine's step loop without threads. There are no prefill and decode phases:
// every step each running request contributes the tokens it has not computed yet (one when
// decoding, a chunk when prefilling) under a per-step token budget, new requests join from a
// FIFO queue as blocks allow, and the newest running request is preempted when KV runs out.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/engine_stats.h"
#include "engine/request.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "models/model.h"

namespace hearth::engine {

struct SchedulerOptions {
  int max_running = 8;                  // --batch: sequences stepped together
  int max_batched_tokens = 2048;        // tokens per forward pass (decode rows + prefill chunks)
  int block_size = 16;                  // tokens per KV block
  int num_blocks = 0;                   // KV blocks in the pool
  int64_t max_idle_cached_blocks = -1;  // --prompt-cache: -1 no cap, 0 disables the cache
  uint64_t cache_namespace = 0;         // model fingerprint + adapter + KV scheme, hashed
  int max_context = 0;                  // tokens per sequence (prompt + generated)
  std::vector<int32_t> eos_ids;         // end generation unless a request sets ignore_eos
  int32_t vocab_size = 0;
  int prefix_hash_bits = 64;  // test seam: fewer bits force prefix-cache hash collisions
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& options);

  // Whether a request of this prompt and these params could ever run: prompt + max_tokens
  // within the context and within the whole KV pool. Pure, so callable from any thread.
  Status check_admissible(std::span<const int32_t> prompt, const SamplingParams& params) const;

  // Queues an admissible request (FIFO).
  void add(std::unique_ptr<Request> request);
  // Marks a request cancelled; its blocks are freed at the start of the next step.
  void cancel(RequestId id);
  // Finishes every request with `reason` (shutdown).
  void abort_all(FinishReason reason, const Status& status);

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }

  // One iteration: reap cancelled requests, schedule, run `model.forward` over the packed
  // batch, sample the rows that reached the end of their tokens, stream them to sinks,
  // finish and free. A forward error fails the requests of that batch and is returned.
  Status step(Model& model);

  EngineStats stats() const;
  const SchedulerOptions& options() const { return options_; }

  // Test support: checks that every block's reference count equals the number of block
  // tables holding it, that no free block is held, that only named blocks are shared, and
  // that the pool's accounting adds up. Aborts on a violation.
  void check_invariants() const;
  // Requests currently running, oldest first (test support).
  std::vector<RequestId> running_ids() const;

 private:
  struct Scheduled {
    Request* request;
    int num_new_tokens;
  };

  int blocks_for(int tokens) const;
  bool ensure_blocks(Request& request, int total_tokens);
  void preempt(Request& request);
  void release_blocks(Request& request);
  void finish(Request& request, FinishReason reason, Status status = {},
              std::optional<int32_t> stop_token = std::nullopt);
  void reap_cancelled();
  void schedule();  // fills scheduled_
  bool try_admit(Request& request, int& budget, std::vector<Scheduled>& scheduled);
  void publish_full_blocks(Request& request);
  void accept_token(Request& request, int32_t token, const TokenLogprobs* logprobs);
  void erase_finished();

  SchedulerOptions options_;
  kv::BlockPool pool_;
  kv::PrefixCache cache_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // admission order: oldest first
  std::deque<Request*> waiting_;   // preempted requests go back to the front

  // Step scratch, reused.
  std::vector<Scheduled> scheduled_;
  std::vector<int32_t> batch_tokens_;
  std::vector<int32_t> batch_positions_;
  std::vector<SequenceSlice> batch_slices_;
  std::vector<int32_t> logit_rows_;
  std::vector<float> logits_;

  ThroughputMeter meter_;
  int64_t preemptions_ = 0;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  int64_t requests_finished_ = 0;
  int64_t steps_ = 0;
};

}  // namespace hearth::engine
