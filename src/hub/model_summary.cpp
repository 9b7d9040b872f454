// Model summaries for ls and fit (see model_summary.h).
#include "hub/model_summary.h"

#include <nlohmann/json.hpp>

#include <map>

#include "base/mapped_file.h"
#include "hub/safetensors_header.h"

namespace hearth::hub {
namespace {

using nlohmann::json;

int int_field(const json& config, const char* name) {
  auto it = config.find(name);
  return it != config.end() && it->is_number_integer() ? it->get<int>() : 0;
}

std::string dtype_name(const std::string& dtype) {
  static const std::map<std::string, std::string> kNames = {
      {"BF16", "bf16"}, {"F16", "f16"}, {"F32", "f32"},          {"F8_E4M3", "fp8"},
      {"U32", "u32"},   {"I8", "int8"}, {"F8_E5M2", "fp8-e5m2"}, {"U8", "u8"}};
  auto it = kNames.find(dtype);
  return it == kNames.end() ? dtype : it->second;
}

std::string quantization_of(const json& config) {
  for (const char* key : {"quantization", "quantization_config"}) {
    auto it = config.find(key);
    if (it == config.end() || !it->is_object()) continue;
    const json& q = *it;
    if (q.contains("quant_method") && q["quant_method"].is_string()) {
      std::string method = q["quant_method"].get<std::string>();
      if (q.contains("bits") && q["bits"].is_number_integer()) {
        return fmt::format("{} {}-bit", method, q["bits"].get<int>());
      }
      return method;
    }
    if (q.contains("bits") && q["bits"].is_number_integer()) {
      int group = q.contains("group_size") && q["group_size"].is_number_integer()
                      ? q["group_size"].get<int>()
                      : 0;
      return group > 0 ? fmt::format("{}-bit g{} (mlx)", q["bits"].get<int>(), group)
                       : fmt::format("{}-bit (mlx)", q["bits"].get<int>());
    }
  }
  return {};
}

}  // namespace

Result<ModelSummary> summarize_model(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_file((dir / "config.json").string()));
  json config = json::parse(text, nullptr, false);
  if (!config.is_object()) return parse_error("{}/config.json: not a JSON object", dir.string());
  ModelSummary s;
  if (config.contains("model_type") && config["model_type"].is_string()) {
    s.model_type = config["model_type"].get<std::string>();
  }
  auto archs = config.find("architectures");
  if (archs != config.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string()) {
    s.architecture = (*archs)[0].get<std::string>();
  } else {
    s.architecture = s.model_type.empty() ? "?" : s.model_type;
  }
  s.quantization = quantization_of(config);
  // Multimodal configs (gemma3, ...) keep the language model's fields in text_config.
  const json& text_config = config.contains("text_config") && config["text_config"].is_object()
                                ? config["text_config"]
                                : config;
  for (const json* c : std::initializer_list<const json*>{&text_config, &config}) {
    if (s.hidden_size == 0) s.hidden_size = int_field(*c, "hidden_size");
    if (s.intermediate_size == 0) s.intermediate_size = int_field(*c, "intermediate_size");
    if (s.num_layers == 0) s.num_layers = int_field(*c, "num_hidden_layers");
    if (s.num_heads == 0) s.num_heads = int_field(*c, "num_attention_heads");
    if (s.num_kv_heads == 0) s.num_kv_heads = int_field(*c, "num_key_value_heads");
    if (s.head_dim == 0) s.head_dim = int_field(*c, "head_dim");
    if (s.vocab_size == 0) s.vocab_size = int_field(*c, "vocab_size");
    if (!s.context_length) {
      int ctx = int_field(*c, "max_position_embeddings");
      if (ctx == 0) ctx = int_field(*c, "max_sequence_length");
      if (ctx > 0) s.context_length = ctx;
    }
  }
  if (s.num_kv_heads == 0) s.num_kv_heads = s.num_heads;
  if (s.head_dim == 0 && s.num_heads > 0) s.head_dim = s.hidden_size / s.num_heads;

  // Parameters from the safetensors headers. An MLX-quantized weight ("x.weight" packed in
  // U32 next to "x.scales") holds scales-elements x group_size logical weights.
  std::map<std::string, TensorHeader> tensors;
  std::map<std::string, std::uint64_t> dtype_bytes;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".safetensors") continue;
    HEARTH_ASSIGN_OR_RETURN(auto headers, read_safetensors_header(entry.path()));
    for (auto& t : headers) {
      s.weight_bytes += t.bytes;
      dtype_bytes[t.dtype] += t.bytes;
      tensors[t.name] = std::move(t);
    }
  }
  if (!tensors.empty()) {
    int group = 0;
    for (const char* key : {"quantization", "quantization_config"}) {
      if (config.contains(key) && config[key].is_object() && config[key].contains("group_size") &&
          config[key]["group_size"].is_number_integer()) {
        group = config[key]["group_size"].get<int>();
      }
    }
    std::uint64_t params = 0;
    for (const auto& [name, t] : tensors) {
      auto base_of = [&](std::string_view suffix) -> std::string {
        if (!name.ends_with(suffix)) return {};
        return name.substr(0, name.size() - suffix.size());
      };
      std::string base = base_of(".scales");
      if (base.empty()) base = base_of(".biases");
      if (!base.empty() && tensors.contains(base + ".weight") &&
          tensors.at(base + ".weight").dtype == "U32") {
        continue;  // quantization metadata, counted with its weight
      }
      base = base_of(".weight");
      if (!base.empty() && t.dtype == "U32" && group > 0 && tensors.contains(base + ".scales")) {
        params += tensors.at(base + ".scales").elements() * static_cast<std::uint64_t>(group);
      } else {
        params += t.elements();
      }
    }
    s.parameters = params;
    if (s.quantization.empty()) {
      auto dominant = std::max_element(dtype_bytes.begin(), dtype_bytes.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
      s.quantization = dtype_name(dominant->first);
    }
  }
  if (s.quantization.empty() && config.contains("torch_dtype") &&
      config["torch_dtype"].is_string()) {
    std::string dtype = config["torch_dtype"].get<std::string>();
    s.quantization = dtype == "bfloat16" ? "bf16" : dtype == "float16" ? "f16" : dtype;
  }
  return s;
}

}  // namespace hearth::hub
