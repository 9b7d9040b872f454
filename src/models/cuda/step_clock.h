// HEARTH_STEP_CLOCK=1 (docs/reference/cli.md): how a CUDA model's sampled decode steps split
// between device work and the device waiting on the host between steps (the engine's
// bookkeeping, the step's upload and launch). Three events a step, on the model's stream: one
// before the step's first upload, one after the forward pass (metadata upload and the graph,
// which ends with the argmax on plain greedy steps), one after the sampled ids' download.
// Busy time is the span from the first to the last, split into the forward pass and the
// sampling tail; idle time the span from one decode step's last event to the next one's
// first. The totals are logged (info) when the clock is destroyed.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <memory>

#include "base/status.h"

namespace hearth {

class StepClock {
 public:
  // A clock when HEARTH_STEP_CLOCK is 1, else null (no events, no cost).
  static std::unique_ptr<StepClock> from_env();
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  // Before the step's first upload; decode: one token per sequence (only those are timed).
  Status begin(cudaStream_t stream, bool decode);
  // After the forward pass's launch, before the sampling work is queued.
  Status forward_done(cudaStream_t stream);
  // The event the sampler records after its download, before it waits.
  cudaEvent_t end_event() const { return end_[slot_]; }
  // After the wait: adds the step's busy time and the idle time before it.
  void finish();

 private:
  StepClock() = default;
  std::array<cudaEvent_t, 2> begin_{};
  std::array<cudaEvent_t, 2> forward_{};
  std::array<cudaEvent_t, 2> end_{};
  int slot_ = 0;
  bool decode_ = false;
  bool previous_decode_ = false;  // the step before this one was a timed decode step
  long steps_ = 0;
  long gaps_ = 0;
  long unread_ = 0;  // elapsed-time readings CUDA refused
  double busy_ms_ = 0;
  double forward_ms_ = 0;
  double idle_ms_ = 0;
};

}  // namespace hearth
