// Packs each step's sampling parameters (rows, then CSR lists of logit-bias pairs and
// penalty contexts, only where a row uses them) into one pinned image, uploads it in one
// copy, runs kernels/cuda/sampling and brings back the ids.
#include "models/cuda/device_sampler.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda/sampling.cuh"

namespace hearth {

using cuda::cuda_status;

void PinnedBuffer::Free::operator()(char* p) const { cudaFreeHost(p); }

Status PinnedBuffer::ensure(std::size_t bytes) {
  if (size_ >= bytes && data_) return ok_status();
  data_.reset();
  size_ = 0;
  void* p = nullptr;
  const std::size_t want = std::max<std::size_t>(bytes + bytes / 2, 4096);
  HEARTH_RETURN_IF_ERROR(cuda_status(cudaMallocHost(&p, want), "allocating pinned host memory"));
  data_.reset(static_cast<char*>(p));
  size_ = want;
  return ok_status();
}

namespace {

// A byte image built on the host with every array at a 16-byte boundary.
class Image {
 public:
  template <typename T>
  std::size_t add(std::span<const T> v) {
    const std::size_t offset = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(offset + v.size_bytes());
    if (!v.empty()) std::memcpy(bytes_.data() + offset, v.data(), v.size_bytes());
    return offset;
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  std::vector<char> bytes_;
};

// A row the argmax decides (temperature 0 or top-k 1): its seed and step are never read.
bool greedy_row(float temperature, int top_k) { return temperature <= 0.0f || top_k == 1; }

}  // namespace

bool DeviceSampler::plain_greedy(std::span<const RowSampling> rows) {
  return !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const RowSampling& r) {
    return !r.on_host && greedy_row(r.temperature, r.top_k) && r.logit_bias.empty() &&
           r.repetition_penalty == 1.0f && r.presence_penalty == 0.0f &&
           r.frequency_penalty == 0.0f;
  });
}

Status DeviceSampler::download(const int32_t* device_ids, std::span<int32_t> tokens,
                               cudaEvent_t downloaded) {
  const std::size_t bytes = tokens.size() * sizeof(int32_t);
  // sample() sized the buffer before queuing its parameter upload from it, so this never
  // frees memory a queued copy still reads.
  HEARTH_RETURN_IF_ERROR(staging_.ensure(bytes));
  cudaStream_t st = ctx_.stream();
  HEARTH_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(staging_.data(), device_ids, bytes, cudaMemcpyDeviceToHost, st),
                  "downloading sampled ids"));
  if (downloaded != nullptr) {
    HEARTH_RETURN_IF_ERROR(
        cuda_status(cudaEventRecord(downloaded, st), "recording the step clock"));
  }
  HEARTH_RETURN_IF_ERROR(ctx_.synchronize());
  std::memcpy(tokens.data(), staging_.data(), bytes);
  return ok_status();
}

Status DeviceSampler::sample(float* logits, int vocab, std::span<const RowSampling> rows,
                             std::span<int32_t> tokens, cudaEvent_t downloaded) {
  const int n = static_cast<int>(rows.size());
  if (tokens.size() != rows.size()) {
    return invalid_argument_error("{} token slots for {} sampled rows", tokens.size(), n);
  }
  if (n == 0) return ok_status();
  std::vector<cuda::SamplingRow> params(static_cast<std::size_t>(n));
  bool any_bias = false, any_repetition = false, any_frequency = false;
  for (int i = 0; i < n; ++i) {
    const RowSampling& r = rows[i];
    cuda::SamplingRow& p = params[i];
    if (r.on_host) {  // a plain argmax nobody reads: its logits went to the host
      p.temperature = 0.0f;
      continue;
    }
    p.temperature = r.temperature;
    p.top_k = r.top_k;
    p.top_p = r.top_p;
    p.min_p = r.min_p;
    p.repetition_penalty = r.repetition_penalty;
    p.presence_penalty = r.presence_penalty;
    p.frequency_penalty = r.frequency_penalty;
    // Zeros where unread keep a greedy decode's image the same each step.
    const bool greedy = greedy_row(r.temperature, r.top_k);
    p.seed = greedy ? 0 : r.seed;
    p.step = greedy ? 0 : r.step;
    any_bias = any_bias || !r.logit_bias.empty();
    any_repetition = any_repetition || r.repetition_penalty != 1.0f;
    any_frequency = any_frequency || r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f;
  }
  // CSR lists: offsets [n + 1] then the values, only for the lists some row needs.
  std::vector<int32_t> bias_offsets{0}, bias_ids, rep_offsets{0}, rep_tokens, freq_offsets{0},
      freq_tokens;
  std::vector<float> bias_values;
  for (const RowSampling& r : rows) {
    if (r.on_host) {
      bias_offsets.push_back(static_cast<int32_t>(bias_ids.size()));
      rep_offsets.push_back(static_cast<int32_t>(rep_tokens.size()));
      freq_offsets.push_back(static_cast<int32_t>(freq_tokens.size()));
      continue;
    }
    if (any_bias) {
      for (const auto& [id, value] : r.logit_bias) {
        bias_ids.push_back(id);
        bias_values.push_back(value);
      }
      bias_offsets.push_back(static_cast<int32_t>(bias_ids.size()));
    }
    if (any_repetition) {
      if (r.repetition_penalty != 1.0f) {
        rep_tokens.insert(rep_tokens.end(), r.prompt_tokens.begin(), r.prompt_tokens.end());
        rep_tokens.insert(rep_tokens.end(), r.output_tokens.begin(), r.output_tokens.end());
      }
      rep_offsets.push_back(static_cast<int32_t>(rep_tokens.size()));
    }
    if (any_frequency) {
      if (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f) {
        freq_tokens.insert(freq_tokens.end(), r.output_tokens.begin(), r.output_tokens.end());
      }
      freq_offsets.push_back(static_cast<int32_t>(freq_tokens.size()));
    }
  }
  Image image;
  const std::size_t off_params = image.add(std::span<const cuda::SamplingRow>(params));
  auto list = [&image](const std::vector<int32_t>& v) { return image.add(std::span(v)); };
  const std::size_t off_bias_offsets = list(bias_offsets), off_bias_ids = list(bias_ids);
  const std::size_t off_bias_values = image.add(std::span<const float>(bias_values));
  const std::size_t off_rep_offsets = list(rep_offsets), off_rep_tokens = list(rep_tokens);
  const std::size_t off_freq_offsets = list(freq_offsets), off_freq_tokens = list(freq_tokens);
  const std::size_t bytes = image.bytes().size();

  cudaStream_t st = ctx_.stream();
  HEARTH_RETURN_IF_ERROR(staging_.ensure(std::max<std::size_t>(bytes, n * sizeof(int32_t))));
  const bool upload = image.bytes() != uploaded_;
  uploaded_.clear();  // unknown until this call completes
  if (image_.size() < bytes) {
    image_ = cuda::DeviceBuffer();
    HEARTH_ASSIGN_OR_RETURN(image_, ctx_.allocate(bytes * 2, "sampling parameters"));
  }
  if (out_.size() < n * sizeof(int32_t)) {
    out_ = cuda::DeviceBuffer();
    HEARTH_ASSIGN_OR_RETURN(out_, ctx_.allocate(n * sizeof(int32_t) * 2, "sampled ids"));
  }
  const bool penalties = any_repetition || any_frequency;
  if (penalties && counts_.size() < cuda::sampling_workspace_bytes(n, vocab)) {
    counts_ = cuda::DeviceBuffer();
    HEARTH_ASSIGN_OR_RETURN(
        counts_, ctx_.allocate(cuda::sampling_workspace_bytes(n, vocab), "penalty counters"));
  }
  if (upload) {
    std::memcpy(staging_.data(), image.bytes().data(), bytes);
    HEARTH_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(image_.data(), staging_.data(), bytes, cudaMemcpyHostToDevice, st),
        "uploading sampling parameters"));
  }
  auto at = [this](std::size_t offset) { return static_cast<char*>(image_.data()) + offset; };
  auto ints = [&](std::size_t offset) { return reinterpret_cast<const int32_t*>(at(offset)); };
  cuda::SamplingArgs a;
  a.logits = logits;
  a.ld_logits = vocab;
  a.rows = n;
  a.vocab = vocab;
  a.params = reinterpret_cast<const cuda::SamplingRow*>(at(off_params));
  if (any_bias) {
    a.bias_offsets = ints(off_bias_offsets);
    a.bias_ids = ints(off_bias_ids);
    a.bias_values = reinterpret_cast<const float*>(at(off_bias_values));
  }
  if (any_repetition) {
    a.repetition_offsets = ints(off_rep_offsets);
    a.repetition_tokens = ints(off_rep_tokens);
  }
  if (any_frequency) {
    a.frequency_offsets = ints(off_freq_offsets);
    a.frequency_tokens = ints(off_freq_tokens);
  }
  a.counts = penalties ? counts_.as<int32_t>() : nullptr;
  a.out_tokens = out_.as<int32_t>();
  // Greedy rows only (on_host rows are plain argmaxes too): the argmax split over blocks.
  a.all_greedy = std::all_of(params.begin(), params.end(), [](const cuda::SamplingRow& p) {
    return greedy_row(p.temperature, p.top_k);
  });
  if (a.all_greedy) {
    const std::size_t bytes = cuda::greedy_workspace_bytes(n);
    if (greedy_.size() < bytes) {
      greedy_ = cuda::DeviceBuffer();
      HEARTH_ASSIGN_OR_RETURN(greedy_, ctx_.allocate(bytes * 2, "greedy sampling slots"));
      HEARTH_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(greedy_.data(), 0, greedy_.size(), st),
                                         "zeroing the greedy sampling slots"));
    }
    a.greedy_state = greedy_.data();
  }
  HEARTH_RETURN_IF_ERROR(cuda_status(cuda::sample_tokens(a, st), "sampling on the device"));
  // The ids land in the pinned staging buffer (its parameter image was consumed by the
  // upload above, which precedes the download on the stream).
  HEARTH_RETURN_IF_ERROR(download(out_.as<int32_t>(), tokens, downloaded));
  uploaded_ = image.bytes();
  return ok_status();
}

}  // namespace hearth
