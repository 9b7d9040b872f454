// On-device sampling so only token ids cross to the host: logit_bias, repetition /
// presence / frequency penalties, then greedy, or temperature with top-k, top-p and min-p
// truncation and a seeded draw. Same order and meaning as engine::Sampler (XTC is not
// done here: the engine samples such rows on the host).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hearth::cuda {

struct SamplingRow {
  float temperature = 1.0f;         // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;                    // 0: off; 1: greedy
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // over repetition_tokens (prompt + output)
  float presence_penalty = 0.0f;    // over frequency_tokens (output only)
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;  // the draw is a function of (seed, step): same inputs, same token
  uint64_t step = 0;
};

struct SamplingArgs {
  float* logits = nullptr;  // [rows, vocab] f32 (row stride ld_logits); modified in place
  int64_t ld_logits = 0;
  int rows = 0;
  int vocab = 0;
  const SamplingRow* params = nullptr;  // [rows], device memory
  // Optional CSR lists ([rows + 1] offsets into the id arrays); null = none for all rows.
  const int32_t* bias_offsets = nullptr;
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  const int32_t* repetition_offsets = nullptr;
  const int32_t* repetition_tokens = nullptr;
  const int32_t* frequency_offsets = nullptr;
  const int32_t* frequency_tokens = nullptr;
  int32_t* counts = nullptr;      // sampling_workspace_bytes(); needed when a penalty list is set
  int32_t* out_tokens = nullptr;  // [rows]
  // Every row greedy (the caller knows) and greedy_state set: each row's argmax is split over
  // blocks of 4096 ids that meet in greedy_state (greedy_workspace_bytes(rows), zeroed once
  // before its first use; a row's last block leaves its entries zero again). Otherwise one
  // block a row walks the whole vocab.
  bool all_greedy = false;
  void* greedy_state = nullptr;
  // The split argmax (all_greedy with greedy_state, no bias or penalty lists; params may then
  // be null) launched programmatically dependent on the kernel that writes the logits (sm_90+
  // only; the caller checks): it launches while that kernel drains, then waits for it.
  bool pdl = false;
};

size_t sampling_workspace_bytes(int rows, int vocab);
size_t greedy_workspace_bytes(int rows);

cudaError_t sample_tokens(const SamplingArgs& args, cudaStream_t stream);

}  // namespace hearth::cuda
