// ModelConfig: what hearth needs from a model directory's config.json and
// generation_config.json, parsed and validated once at load (llama, mistral, qwen2,
// qwen3). Anything unsupported is an error naming the field, never silently ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth {

enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLlama3 };

// rope_scaling / rope_parameters, in transformers' meaning of each field.
struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;
  double partial_rotary_factor = 1.0;
  int original_max_position_embeddings = 0;  // llama3, yarn, dynamic
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  double beta_fast = 32.0;                   // yarn
  double beta_slow = 1.0;                    // yarn
  std::optional<double> attention_factor;    // yarn: scales cos and sin
  std::optional<double> mscale;              // yarn
  std::optional<double> mscale_all_dim;      // yarn
  bool truncate = true;                      // yarn
};

std::string_view rope_type_name(RopeType type);

// MLX affine group quantization of one weight (bits 0: not quantized).
struct QuantSpec {
  int bits = 0;
  int group_size = 0;
  bool operator==(const QuantSpec&) const = default;
};

// config.json "quantization": a default spec and per-module overrides (a module path
// such as "model.layers.0.mlp.down_proj" mapped to its own spec, or to none).
struct QuantizationConfig {
  QuantSpec default_spec;
  std::map<std::string, QuantSpec> overrides;
  bool enabled() const { return default_spec.bits != 0 || !overrides.empty(); }
  // The spec a module ("model.layers.3.self_attn.q_proj") is stored with.
  QuantSpec for_module(const std::string& module) const;
};

// generation_config.json (and the eos ids of config.json) as sampling defaults.
struct GenerationDefaults {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<bool> do_sample;
};

struct ModelConfig {
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3"
  std::string architecture;  // "LlamaForCausalLM", ...
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (qwen2; llama's flag)
  bool o_bias = false;          // o_proj carries a bias (llama attention_bias)
  bool mlp_bias = false;
  bool qk_norm = false;  // per-head RMSNorm of q and k before rope (qwen3)
  int max_position_embeddings = 0;
  std::optional<int> sliding_window;    // keys with query_slot - key_slot < window are seen
  std::vector<bool> layer_uses_window;  // [num_layers]
  RopeConfig rope;
  QuantizationConfig quantization;
  GenerationDefaults generation;
  std::string torch_dtype;  // as written; informational

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
};

// Parses config.json's object (generation defaults left empty).
Result<ModelConfig> parse_model_config(const nlohmann::json& config);
// Applies generation_config.json's object to config.generation.
Status parse_generation_config(const nlohmann::json& gen, GenerationDefaults& out);
// Reads <dir>/config.json and, when present, <dir>/generation_config.json.
Result<ModelConfig> load_model_config(const std::string& dir);

}  // namespace hearth
