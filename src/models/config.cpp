// config.json / generation_config.json parsing for the llama family.
#include "models/config.h"

#include <filesystem>
#include <set>

#include "base/mapped_file.h"

namespace hearth {
namespace {

using nlohmann::json;

Result<int> get_int(const json& j, const char* key, std::optional<int> fallback = std::nullopt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return parse_error("config.json: missing field '{}'", key);
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 30)) {
    return parse_error("config.json: field '{}' must be a non-negative integer, got {}", key,
                       it->dump());
  }
  return it->get<int>();
}

Result<double> get_double(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return parse_error("config: field '{}' must be a number", key);
  return it->get<double>();
}

std::optional<double> opt_double(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

Status parse_rope(const json& config, ModelConfig& out) {
  // transformers >= 4.57 writes "rope_parameters" (with rope_theta inside); older
  // configs write "rope_theta" plus an optional "rope_scaling".
  json params = json::object();
  if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object()) {
    params = *it;
  } else if (auto it2 = config.find("rope_scaling"); it2 != config.end() && it2->is_object()) {
    params = *it2;
  }
  RopeConfig& rope = out.rope;
  HEARTH_ASSIGN_OR_RETURN(double theta_top, get_double(config, "rope_theta", 10000.0));
  HEARTH_ASSIGN_OR_RETURN(rope.theta, get_double(params, "rope_theta", theta_top));
  HEARTH_ASSIGN_OR_RETURN(double prf_top, get_double(config, "partial_rotary_factor", 1.0));
  HEARTH_ASSIGN_OR_RETURN(rope.partial_rotary_factor,
                          get_double(params, "partial_rotary_factor", prf_top));
  if (rope.partial_rotary_factor != 1.0) {
    return unsupported_error("config.json: partial_rotary_factor {} (only 1.0 is supported)",
                             rope.partial_rotary_factor);
  }
  std::string type = "default";
  if (auto it = params.find("rope_type"); it != params.end() && it->is_string()) {
    type = it->get<std::string>();
  } else if (auto it2 = params.find("type"); it2 != params.end() && it2->is_string()) {
    type = it2->get<std::string>();
  }
  if (type == "default") {
    rope.type = RopeType::kDefault;
  } else if (type == "linear") {
    rope.type = RopeType::kLinear;
  } else if (type == "dynamic") {
    rope.type = RopeType::kDynamic;
  } else if (type == "yarn") {
    rope.type = RopeType::kYarn;
  } else if (type == "llama3") {
    rope.type = RopeType::kLlama3;
  } else {
    return unsupported_error(
        "config.json: rope type '{}' is not supported (default, linear, "
        "dynamic, yarn, llama3 are)",
        type);
  }
  if (rope.type != RopeType::kDefault) {
    auto f = opt_double(params, "factor");
    if (!f && rope.type != RopeType::kYarn) {
      return parse_error("config.json: rope type '{}' needs 'factor'", type);
    }
    rope.factor = f.value_or(0.0);
  }
  HEARTH_ASSIGN_OR_RETURN(
      rope.original_max_position_embeddings,
      get_int(params, "original_max_position_embeddings", out.max_position_embeddings));
  HEARTH_ASSIGN_OR_RETURN(rope.low_freq_factor, get_double(params, "low_freq_factor", 1.0));
  HEARTH_ASSIGN_OR_RETURN(rope.high_freq_factor, get_double(params, "high_freq_factor", 4.0));
  auto beta_fast = opt_double(params, "beta_fast");
  auto beta_slow = opt_double(params, "beta_slow");
  rope.beta_fast = beta_fast && *beta_fast != 0 ? *beta_fast : 32.0;
  rope.beta_slow = beta_slow && *beta_slow != 0 ? *beta_slow : 1.0;
  rope.attention_factor = opt_double(params, "attention_factor");
  rope.mscale = opt_double(params, "mscale");
  rope.mscale_all_dim = opt_double(params, "mscale_all_dim");
  rope.truncate = get_bool(params, "truncate", true);
  if (rope.type == RopeType::kYarn && rope.factor == 0.0) {
    if (rope.original_max_position_embeddings == 0) {
      return parse_error(
          "config.json: yarn rope needs 'factor' or original_max_position_embeddings");
    }
    rope.factor =
        static_cast<double>(out.max_position_embeddings) / rope.original_max_position_embeddings;
  }
  if (rope.type == RopeType::kLlama3 && (rope.original_max_position_embeddings <= 0 ||
                                         rope.high_freq_factor == rope.low_freq_factor)) {
    return parse_error(
        "config.json: llama3 rope needs original_max_position_embeddings and "
        "distinct low/high freq factors");
  }
  if (rope.theta <= 1.0 || (rope.type != RopeType::kDefault && rope.factor <= 0.0)) {
    return parse_error("config.json: rope_theta must be > 1 and factor > 0");
  }
  return ok_status();
}

Result<QuantSpec> parse_quant_spec(const json& j, const std::string& where) {
  if (!j.is_object()) return parse_error("config.json: quantization{} must be an object", where);
  QuantSpec spec;
  HEARTH_ASSIGN_OR_RETURN(spec.bits, get_int(j, "bits"));
  HEARTH_ASSIGN_OR_RETURN(spec.group_size, get_int(j, "group_size", 64));
  if (spec.bits != 4 && spec.bits != 8) {
    return unsupported_error("config.json: quantization{} bits {} (4 and 8 are supported)", where,
                             spec.bits);
  }
  if (spec.group_size != 32 && spec.group_size != 64 && spec.group_size != 128) {
    return unsupported_error(
        "config.json: quantization{} group_size {} (32, 64, 128 are supported)", where,
        spec.group_size);
  }
  if (auto it = j.find("mode"); it != j.end() && it->is_string() && *it != "affine") {
    return unsupported_error("config.json: quantization mode '{}' (only affine is supported)",
                             it->get<std::string>());
  }
  return spec;
}

Status parse_quantization(const json& config, QuantizationConfig& out) {
  auto it = config.find("quantization");
  if (it == config.end() || it->is_null()) return ok_status();
  HEARTH_ASSIGN_OR_RETURN(out.default_spec, parse_quant_spec(*it, ""));
  for (const auto& [key, value] : it->items()) {
    if (key == "bits" || key == "group_size" || key == "mode") continue;
    if (value.is_boolean()) {
      // false: stored unquantized; true: the default spec.
      out.overrides[key] = value.get<bool>() ? out.default_spec : QuantSpec{};
    } else if (value.is_object()) {
      HEARTH_ASSIGN_OR_RETURN(out.overrides[key], parse_quant_spec(value, "." + key));
    }
  }
  return ok_status();
}

Status parse_token_ids(const json& j, std::vector<int32_t>& out) {
  if (j.is_number_integer()) {
    out = {j.get<int32_t>()};
  } else if (j.is_array()) {
    out.clear();
    for (const auto& v : j) {
      if (!v.is_number_integer()) return parse_error("eos_token_id entries must be integers");
      out.push_back(v.get<int32_t>());
    }
  } else if (!j.is_null()) {
    return parse_error("eos_token_id must be an integer or a list of integers");
  }
  return ok_status();
}

}  // namespace

std::string_view rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kLlama3:
      return "llama3";
  }
  return "?";
}

QuantSpec QuantizationConfig::for_module(const std::string& module) const {
  auto it = overrides.find(module);
  return it != overrides.end() ? it->second : default_spec;
}

Result<ModelConfig> parse_model_config(const json& config) {
  if (!config.is_object()) return parse_error("config.json: not a JSON object");
  ModelConfig out;
  auto type_it = config.find("model_type");
  if (type_it == config.end() || !type_it->is_string()) {
    return parse_error("config.json: missing 'model_type'");
  }
  out.model_type = type_it->get<std::string>();
  static const std::set<std::string> kTypes = {"llama", "mistral", "qwen2", "qwen3"};
  if (!kTypes.contains(out.model_type)) {
    return unsupported_error(
        "config.json: model_type '{}' is not supported (llama, mistral, "
        "qwen2, qwen3 are)",
        out.model_type);
  }
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    out.architecture = (*it)[0].get<std::string>();
  }
  HEARTH_ASSIGN_OR_RETURN(out.vocab_size, get_int(config, "vocab_size"));
  HEARTH_ASSIGN_OR_RETURN(out.hidden_size, get_int(config, "hidden_size"));
  HEARTH_ASSIGN_OR_RETURN(out.intermediate_size, get_int(config, "intermediate_size"));
  HEARTH_ASSIGN_OR_RETURN(out.num_layers, get_int(config, "num_hidden_layers"));
  HEARTH_ASSIGN_OR_RETURN(out.num_heads, get_int(config, "num_attention_heads"));
  HEARTH_ASSIGN_OR_RETURN(out.num_kv_heads, get_int(config, "num_key_value_heads", out.num_heads));
  if (out.vocab_size == 0 || out.hidden_size == 0 || out.intermediate_size == 0 ||
      out.num_layers == 0 || out.num_heads == 0 || out.num_kv_heads == 0) {
    return parse_error("config.json: sizes, layer and head counts must be positive");
  }
  if (out.num_heads % out.num_kv_heads != 0) {
    return parse_error(
        "config.json: num_attention_heads {} is not a multiple of "
        "num_key_value_heads {}",
        out.num_heads, out.num_kv_heads);
  }
  HEARTH_ASSIGN_OR_RETURN(out.head_dim,
                          get_int(config, "head_dim", out.hidden_size / out.num_heads));
  if (out.head_dim == 0 || out.head_dim % 2 != 0) {
    return parse_error("config.json: head_dim {} must be positive and even", out.head_dim);
  }
  HEARTH_ASSIGN_OR_RETURN(double eps, get_double(config, "rms_norm_eps", 1e-6));
  out.rms_norm_eps = static_cast<float>(eps);
  HEARTH_ASSIGN_OR_RETURN(out.max_position_embeddings,
                          get_int(config, "max_position_embeddings", 4096));
  out.tie_word_embeddings = get_bool(config, "tie_word_embeddings", false);
  if (auto act = config.find("hidden_act");
      act != config.end() && act->is_string() && *act != "silu") {
    return unsupported_error("config.json: hidden_act '{}' (only silu is supported)",
                             act->get<std::string>());
  }
  out.mlp_bias = get_bool(config, "mlp_bias", false);
  if (out.model_type == "qwen2") {
    out.attention_bias = true;
  } else if (out.model_type == "llama") {
    out.attention_bias = get_bool(config, "attention_bias", false);
    out.o_bias = out.attention_bias;
  } else if (out.model_type == "qwen3") {
    out.attention_bias = get_bool(config, "attention_bias", false);
    out.qk_norm = true;
  }
  HEARTH_RETURN_IF_ERROR(parse_rope(config, out));

  // Sliding window: mistral applies it to every layer; qwen2/3 only with
  // use_sliding_window, to the layers layer_types marks (or those >= max_window_layers).
  out.layer_uses_window.assign(static_cast<std::size_t>(out.num_layers), false);
  auto sw = config.find("sliding_window");
  if (sw != config.end() && sw->is_number_integer() && sw->get<int64_t>() > 0) {
    bool use = out.model_type == "mistral" || out.model_type == "llama" ||
               get_bool(config, "use_sliding_window", false);
    if (use) {
      out.sliding_window = sw->get<int>();
      auto lt = config.find("layer_types");
      HEARTH_ASSIGN_OR_RETURN(int max_window_layers,
                              get_int(config, "max_window_layers", out.num_layers));
      for (int l = 0; l < out.num_layers; ++l) {
        if (lt != config.end() && lt->is_array() &&
            static_cast<int>(lt->size()) == out.num_layers) {
          out.layer_uses_window[l] = (*lt)[l] == "sliding_attention";
        } else if (out.model_type == "qwen2" || out.model_type == "qwen3") {
          out.layer_uses_window[l] = l >= max_window_layers;
        } else {
          out.layer_uses_window[l] = true;
        }
      }
    }
  }
  HEARTH_RETURN_IF_ERROR(parse_quantization(config, out.quantization));
  if (auto it = config.find("torch_dtype"); it != config.end() && it->is_string()) {
    out.torch_dtype = it->get<std::string>();
  } else if (auto it2 = config.find("dtype"); it2 != config.end() && it2->is_string()) {
    out.torch_dtype = it2->get<std::string>();
  }
  if (auto it = config.find("eos_token_id"); it != config.end()) {
    HEARTH_RETURN_IF_ERROR(
        parse_token_ids(*it, out.generation.eos_token_ids).with_context("config.json"));
  }
  if (auto it = config.find("bos_token_id"); it != config.end() && it->is_number_integer()) {
    out.generation.bos_token_id = it->get<int32_t>();
  }
  return out;
}

Status parse_generation_config(const json& gen, GenerationDefaults& out) {
  if (!gen.is_object()) return parse_error("generation_config.json: not a JSON object");
  if (auto it = gen.find("eos_token_id"); it != gen.end() && !it->is_null()) {
    HEARTH_RETURN_IF_ERROR(
        parse_token_ids(*it, out.eos_token_ids).with_context("generation_config.json"));
  }
  if (auto it = gen.find("bos_token_id"); it != gen.end() && it->is_number_integer()) {
    out.bos_token_id = it->get<int32_t>();
  }
  auto num = [&](const char* key) -> std::optional<float> {
    auto it = gen.find(key);
    if (it == gen.end() || !it->is_number()) return std::nullopt;
    return it->get<float>();
  };
  out.temperature = num("temperature");
  out.top_p = num("top_p");
  out.min_p = num("min_p");
  out.repetition_penalty = num("repetition_penalty");
  if (auto k = num("top_k")) out.top_k = static_cast<int>(*k);
  if (auto it = gen.find("do_sample"); it != gen.end() && it->is_boolean()) {
    out.do_sample = it->get<bool>();
  }
  return ok_status();
}

Result<ModelConfig> load_model_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!fs::is_regular_file(path)) {
    return not_found_error("{} is not a model directory: no config.json", dir);
  }
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_file(path));
  json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return parse_error("{}: invalid JSON", path);
  HEARTH_ASSIGN_OR_RETURN(ModelConfig out, parse_model_config(config));
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::is_regular_file(gen_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string gen_text, read_file(gen_path));
    json gen = json::parse(gen_text, nullptr, false);
    if (gen.is_discarded()) return parse_error("{}: invalid JSON", gen_path);
    HEARTH_RETURN_IF_ERROR(parse_generation_config(gen, out.generation));
  }
  return out;
}

}  // namespace hearth
