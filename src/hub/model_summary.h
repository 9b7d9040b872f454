// A model directory at a glance, for `ls` and `fit`: architecture, parameter count (from
// the safetensors headers), quantization, context length and the dimensions that size
// the KV cache. Reads any architecture's config.json (also ones hearth cannot run yet),
// so it is a tolerant reader of a few fields, not the loader's validating parser.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "base/status.h"

namespace hearth::hub {

struct ModelSummary {
  std::string architecture;  // "LlamaForCausalLM", else model_type, else "?"
  std::string model_type;
  std::optional<std::uint64_t> parameters;  // logical weights (quantized ones unpacked)
  std::string quantization;                 // "4-bit g64 (mlx)", "fp8", or the dtype "bf16"
  std::optional<std::int64_t> context_length;
  std::uint64_t weight_bytes = 0;  // tensor bytes in *.safetensors
  // Dimensions (0 when config.json lacks them).
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
};

Result<ModelSummary> summarize_model(const std::filesystem::path& dir);

}  // namespace hearth::hub
