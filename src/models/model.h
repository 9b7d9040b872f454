// The model interface every layer above builds on: a loaded model runs one forward pass
// over a flattened varlen batch (prefill chunks and decode rows together) against the
// paged KV storage it owns. See docs/architecture.md ("The engine") for how the engine
// drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "models/config.h"

namespace hearth {

// One sequence's slice of a ForwardBatch. Its tokens are batch.tokens[first_token,
// first_token + num_tokens); they are written to KV slots num_cached .. num_cached +
// num_tokens - 1 of the sequence (slot s lives in block block_table[s / block_size] at
// offset s % block_size) and attend to slots 0 .. their own (causal; sliding window
// where the config has one).
struct SequenceSlice {
  int32_t first_token = 0;
  int32_t num_tokens = 0;
  int32_t num_cached = 0;                // tokens of this sequence already in KV
  std::span<const int32_t> block_table;  // [ceil((num_cached + num_tokens) / block_size)]
};

// A flattened varlen batch. There are no prefill and decode phases: a decode row is a
// one-token slice, a prefill chunk a longer one.
struct ForwardBatch {
  std::span<const int32_t> tokens;           // [num_tokens]
  std::span<const int32_t> positions;        // [num_tokens] rope positions
  std::span<const SequenceSlice> sequences;  // slices cover tokens, disjoint
  std::span<const int32_t> logit_rows;       // token indices whose logits are wanted
};

enum class KernelKind {
  kCpu,        // SIMD + thread pool (default)
  kReference,  // plain C++ from kernels/ref: slow, the oracle for the fast paths
};

// Where the forward runs. kCuda needs a build with the CUDA backend and a device.
enum class Device { kCpu, kCuda };

struct LoadOptions {
  int threads = 0;  // 0: every core the process may run on
  KernelKind kernels = KernelKind::kCpu;
  Device device = Device::kCpu;
  int device_index = 0;  // CUDA device ordinal
  // kCuda: bytes of device memory the model may allocate (weights, KV, scratch); 0 = the
  // device's free memory minus a reserve for the runtime.
  uint64_t memory_budget_bytes = 0;
  bool compiled_decode = true;  // kCuda: replay decode steps as CUDA graphs
  bool show_progress = false;   // kCuda: log weight-upload progress
  // kCpu: quantized weights multiply activations rounded to int8 per group with integer dot
  // products (AVX512-VNNI); ignored where the CPU lacks them. Changes outputs slightly, so off
  // here (library callers and the parity tests get f32 compute); the CLI's --cpu-int8-dot
  // turns it on by default.
  bool cpu_int8_dot = false;
  // A row's output does not depend on what else its step holds (--batch-invariant on).
  // kCpu: linears the int8 path takes (cpu_int8_dot, quantized) get their codes interleaved
  // by 16 rows (kernels/cpu/int8_dot.h, interleave_rows16), read by decode (1-4 rows) in the
  // prefill GEMM's summation order; the row-major codes are released (a tied embedding's
  // lookup reads the interleaved copy). Every other linear (float weights, or quantized off
  // the int8 path) runs every row count through the same 4 x 4 dot-product tiles instead of
  // the mat-vec (1-4 rows) and the cache-blocked GEMM, which sum in other orders; the bf16
  // prefill GEMM (cpu_bf16_dot) is not used. kCuda: CudaLoadOptions::batch_invariant (bf16
  // models only).
  bool batch_invariant = false;
  // --batch-invariant auto: load decides batch_invariant where it costs about nothing: on
  // for a CPU model whose linears take the int8 path, off for float weights on the CPU (decode
  // 0.86-0.99x on issue 4's host, session 25) and on CUDA.
  bool batch_invariant_auto = false;
  // kCpu: bf16 weights in prefill (batches over 4 rows) multiply activations rounded to bf16
  // with AVX512-BF16 dot products; ignored where the CPU lacks them. Changes outputs
  // slightly, so off unless asked for (--cpu-bf16-dot on).
  bool cpu_bf16_dot = false;
};

// How one logits row becomes a token on the device: engine::SamplingParams minus what
// needs the host (logprobs, XTC), plus the request's context for the penalties.
struct RowSampling {
  // The row needs the host sampler (logprobs, XTC): forward_sample copies its logits out
  // instead of sampling it.
  bool on_host = false;
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::span<const std::pair<int32_t, float>> logit_bias;
  std::span<const int32_t> prompt_tokens;  // repetition penalty: prompt + output
  std::span<const int32_t> output_tokens;  // presence / frequency: output only
  uint64_t seed = 0;                       // the draw is a function of (seed, step)
  uint64_t step = 0;
};

// Device memory as the model sees it (a GPU backend); the engine sizes the KV pool from it.
struct DeviceMemoryUsage {
  uint64_t total_bytes = 0;  // the device's capacity
  uint64_t free_bytes = 0;   // what the model may still allocate (device free, under budget)
  uint64_t used_bytes = 0;   // allocated by the model now
  uint64_t peak_bytes = 0;   // most ever allocated by the model
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;

  // Allocates (or replaces) KV storage of num_blocks x block_size token slots per layer.
  virtual Status create_kv_cache(int num_blocks, int block_size) = 0;
  virtual int kv_num_blocks() const = 0;
  virtual int kv_block_size() const = 0;
  // Bytes one block of block_size tokens costs over all layers (K and V).
  virtual std::size_t kv_bytes_per_block(int block_size) const = 0;
  // Copies every layer's K and V of block src into block dst (copy-on-write of a shared
  // prefix block).
  virtual Status copy_kv_block(int src, int dst) = 0;

  // Runs the batch; writes logits [batch.logit_rows.size(), vocab] row-major. Validates
  // the batch (token ids, block ids, slot ranges) and returns an error instead of
  // touching memory it does not own.
  virtual Status forward(const ForwardBatch& batch, std::span<float> logits) = 0;

  // True when forward_sample samples on the device (only token ids cross to the host).
  virtual bool samples_on_device() const { return false; }
  // Runs the batch like forward(), then turns logit row i into tokens[i] with rows[i] on
  // the device; rows marked on_host instead get their logits written, in order, to
  // host_logits [number of on_host rows, vocab]. Greedy ids equal forward() + the host
  // sampler's; seeded draws are the device's own (reproducible per seed and step).
  // Unsupported unless samples_on_device().
  virtual Status forward_sample(const ForwardBatch& batch, std::span<const RowSampling> rows,
                                std::span<int32_t> tokens, std::span<float> host_logits);

  // Called once the engine has sized its steps (at most max_tokens tokens and max_rows logit
  // rows a step), before the first one: a backend may meet its step shapes ahead of need here
  // (CUDA: load the GEMM kernels the row counts pick). No effect on any output.
  virtual Status warm_up(int max_tokens, int max_rows) {
    (void)max_tokens;
    (void)max_rows;
    return ok_status();
  }

  // Device memory figures; nullopt for a model in host RAM.
  virtual std::optional<DeviceMemoryUsage> device_memory() const { return std::nullopt; }

  // Bytes of weights resident (mapped or copied) and a one-line summary of the
  // performance levers in effect ("cpu, 2 threads, avx512, weights bf16 ...").
  virtual std::size_t weight_bytes() const = 0;
  virtual std::string describe() const = 0;
};

// Loads a HuggingFace model directory (config.json, *.safetensors, optional
// generation_config.json). Errors name the file, field or tensor at fault.
Result<std::unique_ptr<Model>> load_model(const std::string& dir, const LoadOptions& options);

}  // namespace hearth
