// The llama-family forward on an NVIDIA GPU: weights uploaded once to device memory (q/k/v
// and gate/up fused into one matrix each), bf16 activations with f32 accumulation, paged
// bf16 KV cache on the device, logits copied back for the rows asked for.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "models/model.h"

namespace hearth {

struct CudaLoadOptions {
  int device = 0;
  std::size_t memory_budget = 0;  // bytes; 0 = the device's free memory minus a reserve
  bool show_progress = false;     // log upload progress (info level)
  // Capture decode steps as CUDA graphs and replay them: steps of up to kMaxGraphTokens
  // tokens and decode-only steps (one token per sequence) of up to kMaxGraphRows rows, from
  // the second step of the same shape on. At most kMaxGraphs graphs are kept (least recently
  // used evicted). The output is bit-identical to eager execution (same kernels, same
  // arguments).
  bool compiled_decode = true;
  static constexpr int kMaxGraphTokens = 8;
  static constexpr int kMaxGraphRows = 1024;
  static constexpr int kMaxGraphs = 64;
  // Threads that map the shards' pages while the CUDA context starts, then copy them into
  // pinned staging buffers while the DMA engine uploads earlier chunks; 0 = min(8, cores).
  int upload_threads = 0;
  // Dense gate_up layout on the device: 0 all gate rows, then all up rows; b > 0 blocks of b
  // gate rows, then their b up rows (b must divide the intermediate size, else 0 is used).
  // The same bits either way; a lever for the decode GEMV's memory access (lab_decode_step).
  int gate_up_block = 0;
  // --batch-invariant: a row's logits do not depend on what else its step holds (dense bf16
  // models). Every GEMM runs in blocks of cuda::kInvariantRows rows through one plan per
  // weight shape (no decode GEMV, no split-K choice by batch size) and every query runs the
  // 4-warp attention kernel in one pass over its keys. Slower: batch-1 decode runs 64-row
  // GEMMs and long prompts' attention has no tensor-core path. Quantized models are refused.
  bool batch_invariant = false;
};

// Loads a HuggingFace model directory onto the GPU. Errors (no device, budget too small,
// unsupported tensors) are Status values naming the cause.
Result<std::unique_ptr<Model>> load_cuda_model(const std::string& dir,
                                               const CudaLoadOptions& options);

}  // namespace hearth
