// DeviceSampler: turns the logits rows a CUDA forward left on the device into token ids
// with each row's RowSampling, so only ids (4 bytes a row) cross to the host. Owns the
// pinned staging buffers and the device copies of the per-step sampling parameters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "kernels/cuda/device_context.h"
#include "models/model.h"

namespace hearth {

// Page-locked host memory (cudaMallocHost): host <-> device copies from it are true
// asynchronous DMA; pageable memory is staged by the driver first.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  Status ensure(std::size_t bytes);  // grows (contents lost) when smaller than bytes
  char* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Free> data_;
  std::size_t size_ = 0;
};

class DeviceSampler {
 public:
  explicit DeviceSampler(cuda::DeviceContext& ctx) : ctx_(ctx) {}

  // Samples rows.size() rows of logits [rows, vocab] (f32, device, modified in place) on the
  // context's stream, then copies the ids into `tokens` and waits for them; `downloaded`, when
  // set, is recorded on the stream after the ids' download (a StepClock's end).
  Status sample(float* logits, int vocab, std::span<const RowSampling> rows,
                std::span<int32_t> tokens, cudaEvent_t downloaded = nullptr);

  // Rows whose ids are their logits' argmax with nothing before it (greedy, no bias, no
  // penalty, none for the host): the split argmax alone decides them, reading no parameters
  // (a model may run it at the end of its own step).
  static bool plain_greedy(std::span<const RowSampling> rows);

  // tokens.size() ids at device_ids (int32, the context's stream) copied into `tokens`
  // through the pinned staging buffer; waits for them. `downloaded` as in sample().
  Status download(const int32_t* device_ids, std::span<int32_t> tokens,
                  cudaEvent_t downloaded = nullptr);

 private:
  cuda::DeviceContext& ctx_;
  PinnedBuffer staging_;      // host image of the parameters, then the ids coming back
  cuda::DeviceBuffer image_;  // device copy of the parameter image
  // What image_ holds after the last call that completed (empty: unknown). A call whose
  // image is the same skips its upload: a greedy decode's image is the same every step.
  std::vector<char> uploaded_;
  cuda::DeviceBuffer counts_;  // penalty counters [2, rows, vocab]
  cuda::DeviceBuffer out_;     // int32 [rows]
  cuda::DeviceBuffer greedy_;  // the split argmax's meeting slots (zero between calls)
};

}  // namespace hearth
