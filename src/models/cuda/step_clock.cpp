#include "models/cuda/step_clock.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string_view>

#include "kernels/cuda/device_context.h"

namespace hearth {

using cuda::cuda_status;

std::unique_ptr<StepClock> StepClock::from_env() {
  const char* env = std::getenv("HEARTH_STEP_CLOCK");
  if (env == nullptr || std::string_view(env) != "1") return nullptr;
  std::unique_ptr<StepClock> clock(new StepClock());
  for (int i = 0; i < 2; ++i) {
    if (cudaEventCreate(&clock->begin_[i]) != cudaSuccess ||
        cudaEventCreate(&clock->forward_[i]) != cudaSuccess ||
        cudaEventCreate(&clock->end_[i]) != cudaSuccess) {
      spdlog::warn("HEARTH_STEP_CLOCK: could not create CUDA events; no step clock");
      return nullptr;
    }
  }
  return clock;
}

StepClock::~StepClock() {
  if (steps_ > 0 || unread_ > 0) {
    spdlog::info(
        "step clock: {} decode steps, device busy {:.3f} ms a step (upload through the sampled "
        "ids' download: forward pass {:.3f} ms, sampling tail {:.3f} ms); device idle between "
        "decode steps {:.3f} ms ({} gaps); {} readings failed",
        steps_, steps_ > 0 ? busy_ms_ / steps_ : 0.0, steps_ > 0 ? forward_ms_ / steps_ : 0.0,
        steps_ > 0 ? (busy_ms_ - forward_ms_) / steps_ : 0.0, gaps_ > 0 ? idle_ms_ / gaps_ : 0.0,
        gaps_, unread_);
  }
  for (int i = 0; i < 2; ++i) {
    if (begin_[i] != nullptr) cudaEventDestroy(begin_[i]);
    if (forward_[i] != nullptr) cudaEventDestroy(forward_[i]);
    if (end_[i] != nullptr) cudaEventDestroy(end_[i]);
  }
}

Status StepClock::begin(cudaStream_t stream, bool decode) {
  previous_decode_ = decode_;
  decode_ = decode;
  slot_ ^= 1;
  return cuda_status(cudaEventRecord(begin_[slot_], stream), "recording the step clock");
}

Status StepClock::forward_done(cudaStream_t stream) {
  return cuda_status(cudaEventRecord(forward_[slot_], stream), "recording the step clock");
}

void StepClock::finish() {
  if (!decode_) return;
  float busy = 0.0f;
  float forward = 0.0f;
  if (cudaEventElapsedTime(&busy, begin_[slot_], end_[slot_]) != cudaSuccess ||
      cudaEventElapsedTime(&forward, begin_[slot_], forward_[slot_]) != cudaSuccess) {
    ++unread_;  // counted in the summary, not silently dropped
    return;
  }
  busy_ms_ += busy;
  forward_ms_ += forward;
  ++steps_;
  float idle = 0.0f;
  if (!previous_decode_) return;
  if (cudaEventElapsedTime(&idle, end_[slot_ ^ 1], begin_[slot_]) != cudaSuccess) {
    ++unread_;
    return;
  }
  idle_ms_ += idle;
  ++gaps_;
}

}  // namespace hearth
