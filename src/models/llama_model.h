// The llama-family forward (Llama 2/3, Mistral, Qwen2, Qwen3) on the CPU in f32: one
// readable pass over a flattened varlen batch with paged KV. Weights stay where the
// safetensors mapping put them (bf16 / f16 / MLX-quantized are read directly by the
// kernels); only norm vectors and biases are converted to f32.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "kernels/weight.h"
#include "models/model.h"
#include "models/rope.h"
#include "models/safetensors.h"
#include "tensor/buffer.h"

namespace hearth {

struct Linear {
  kernels::WeightMatrix w;  // [out, in]
  std::vector<float> bias;  // [out] or empty
};

struct LlamaLayer {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> post_norm;   // [hidden]
  std::vector<float> q_norm;      // [head_dim] (qwen3) or empty
  std::vector<float> k_norm;      // [head_dim] (qwen3) or empty
  Linear q, k, v, o;              // q [q_dim, hidden], k/v [kv_dim, hidden], o [hidden, q_dim]
  Linear gate, up, down;          // gate/up [inter, hidden], down [hidden, inter]
};

struct LlamaWeights {
  kernels::WeightMatrix embed;    // [vocab, hidden]
  kernels::WeightMatrix lm_head;  // [vocab, hidden] (the embedding when tied)
  std::vector<float> final_norm;  // [hidden]
  std::vector<LlamaLayer> layers;
  std::vector<Buffer> owned;  // aligned copies of tensors the file left misaligned, the copies
                              // prepare_rows16 and prepare_panels16 make
  // prepare_rows16 / prepare_panels16: bytes of the interleaved copies, and of the row-major
  // tensors they released (freed copies, or file pages no longer resident).
  std::size_t interleaved_bytes = 0;
  std::size_t released_bytes = 0;
};

// Resolves and validates every tensor the config calls for (names, dtypes, shapes,
// quantization specs); errors name the tensor.
Result<LlamaWeights> load_llama_weights(const ModelConfig& config, const WeightStore& store);

// For the CPU int8 path: every quantized linear (and the head) in the batch-invariant layout
// (kernels/cpu/int8_dot.h, interleave_rows16), its buffers kept in weights.owned; the
// row-major codes, scales and biases are then released (null; freed, or their pages in
// `store`'s mappings dropped), a tied head's too (the embedding then reads the rows16 copy).
// Built on `pool`'s threads like prepare_panels16's copies.
Status prepare_rows16(LlamaWeights& weights, const WeightStore& store,
                      kernels::cpu::ThreadPool& pool);

// For CPU batch invariance on float weights: every float projection (and the head) copied 16
// rows interleaved (kernels/cpu/gemm_dense.h, WeightMatrix::panels16), which the invariant GEMM,
// its decode form and a tied head's embedding gather read instead of the row-major data; that
// data stays valid, but its file pages are dropped as each copy is built, kInterleaveLoadBlocks
// groups at a time (no matrix held twice). An owned (aligned) copy is kept as well. Each
// chunk's groups are interleaved on `pool`'s threads, into memory not zeroed first (the 1B
// model's 2.4 GB on issue 4's host: 1.9-2.2 s on one thread, 0.23-0.42 s on 16).
Status prepare_panels16(LlamaWeights& weights, const WeightStore& store,
                        kernels::cpu::ThreadPool& pool);

class LlamaModel : public Model {
 public:
  // ctx: the CPU context load_model built the interleaved copies with (its pool runs the
  // model's kernels too).
  LlamaModel(ModelConfig config, WeightStore store, LlamaWeights weights,
             std::unique_ptr<kernels::cpu::CpuContext> ctx, const LoadOptions& options);

  const ModelConfig& config() const override { return config_; }
  Status create_kv_cache(int num_blocks, int block_size) override;
  int kv_num_blocks() const override { return num_blocks_; }
  int kv_block_size() const override { return block_size_; }
  std::size_t kv_bytes_per_block(int block_size) const override;
  Status copy_kv_block(int src, int dst) override;
  Status forward(const ForwardBatch& batch, std::span<float> logits) override;
  // Resident weights: the files (or their aligned copies), less what prepare_rows16 /
  // prepare_panels16 released, plus their interleaved copies.
  std::size_t weight_bytes() const override {
    return store_.total_bytes() - weights_.released_bytes + weights_.interleaved_bytes;
  }
  std::string describe() const override;

 private:
  Status validate(const ForwardBatch& batch, std::span<float> logits) const;
  void linear(const Linear& l, const float* x, int64_t m, float* y);
  void rms_norm(const float* x, const std::vector<float>& w, int64_t rows, int64_t dim, float* out);
  // x[i] += h[i], i < n.
  void residual_add(float* x, const float* h, int64_t n);
  void rope(float* x, const int32_t* positions, int64_t tokens, int heads, const RopeTables& t);

  ModelConfig config_;
  WeightStore store_;  // keeps the mapped weights alive
  LlamaWeights weights_;
  KernelKind kernels_;
  std::unique_ptr<kernels::cpu::CpuContext> ctx_;
  RopeTables rope_;
  int num_blocks_ = 0;
  int block_size_ = 0;
  std::vector<Buffer> k_cache_;  // per layer [num_blocks, block_size, kv_heads, head_dim]
  std::vector<Buffer> v_cache_;
};

}  // namespace hearth
