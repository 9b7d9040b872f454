// EngineStats: the counters /stats and /metrics report, as one snapshot; and the
// ThroughputMeter that turns per-step token counts into recent tokens per second.
#pragma once

#include <cstdint>
#include <deque>

namespace hearth::engine {

struct EngineStats {
  int running = 0;          // requests holding KV and being stepped
  int waiting = 0;          // queued for blocks or a batch slot (includes preempted ones)
  int64_t preemptions = 0;  // total times a running request was preempted
  int blocks_total = 0;
  int blocks_used = 0;    // referenced by a running request
  int blocks_free = 0;    // neither referenced nor cached
  int blocks_cached = 0;  // holding a named prefix block (in use or idle)
  int blocks_idle = 0;    // cached with no reference: reclaimable
  int block_size = 0;
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up at first admission
  int64_t prefix_hit_tokens = 0;    // of which found in the cache
  double prefix_hit_rate = 0;       // hit / query tokens
  int64_t prompt_tokens_total = 0;  // prompt tokens computed (prefill, incl. recompute)
  int64_t generation_tokens_total = 0;
  int64_t requests_finished = 0;
  int64_t steps = 0;
  double prompt_tokens_per_s = 0;  // over the last few seconds
  double generation_tokens_per_s = 0;
};

// Sliding-window rates: record() after each step; rates over the last `window_s` seconds.
// Running sums make both O(1) amortized: the engine thread snapshots stats every step.
class ThroughputMeter {
 public:
  explicit ThroughputMeter(double window_s = 5.0) : window_ns_(int64_t(window_s * 1e9)) {}

  void record(int64_t now_ns, int64_t prompt_tokens, int64_t generated_tokens) {
    samples_.push_back({now_ns, prompt_tokens, generated_tokens});
    prompt_sum_ += prompt_tokens;
    generated_sum_ += generated_tokens;
    while (now_ns - samples_.front().t_ns > window_ns_) {
      prompt_sum_ -= samples_.front().prompt;
      generated_sum_ -= samples_.front().generated;
      samples_.pop_front();
    }
  }
  // Tokens per second (prompt, generated) over the samples inside the window before now.
  void rates(int64_t now_ns, double& prompt_per_s, double& generated_per_s) const {
    int64_t p = prompt_sum_, g = generated_sum_;
    for (const Sample& s : samples_) {  // oldest first: stop at the first one still inside
      if (now_ns - s.t_ns <= window_ns_) break;
      p -= s.prompt;
      g -= s.generated;
    }
    double seconds = static_cast<double>(window_ns_) * 1e-9;
    prompt_per_s = static_cast<double>(p) / seconds;
    generated_per_s = static_cast<double>(g) / seconds;
  }

 private:
  struct Sample {
    int64_t t_ns;
    int64_t prompt;
    int64_t generated;
  };
  int64_t window_ns_;
  std::deque<Sample> samples_;
  int64_t prompt_sum_ = 0;     // over samples_
  int64_t generated_sum_ = 0;  // over samples_
};

}  // namespace hearth::engine
