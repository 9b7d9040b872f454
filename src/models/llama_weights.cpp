// Resolving the llama family's tensors from a WeightStore into kernel-ready matrices.
#include <fmt/format.h>

#include <cstring>

#include "models/llama_model.h"

namespace hearth {
namespace {

bool aligned_for(const void* p, DType dtype) {
  return reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) == 0;
}

// The tensor's data, copied into an aligned Buffer when the file left it misaligned (the
// copy is then what is read, so the file's pages it was read from are dropped again).
Result<const void*> aligned_data(const WeightStore& store, const TensorView& t, LlamaWeights& w) {
  if (aligned_for(t.data, t.dtype)) return t.data;
  HEARTH_ASSIGN_OR_RETURN(Buffer b, Buffer::allocate(t.nbytes()));
  std::memcpy(b.data(), t.data, t.nbytes());
  store.drop_pages(t.data, t.nbytes());
  w.owned.push_back(std::move(b));
  return static_cast<const void*>(w.owned.back().data());
}

Result<std::vector<float>> load_vector(const WeightStore& store, const std::string& name,
                                       int64_t size) {
  HEARTH_ASSIGN_OR_RETURN(TensorView t, store.get(name));
  if (t.shape != Shape{size}) {
    return parse_error("tensor '{}': shape {} but the config implies [{}]", name,
                       t.shape.to_string(), size);
  }
  std::vector<float> out(static_cast<std::size_t>(size));
  const auto* bytes = t.as<uint8_t>();
  for (int64_t i = 0; i < size; ++i) {
    uint16_t h;
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(&out[i], bytes + 4 * i, 4);
        break;
      case DType::kBF16:
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = bf16_to_f32(h);
        break;
      case DType::kF16:
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = f16_to_f32(h);
        break;
      default:
        return unsupported_error("tensor '{}': dtype {} (f32, bf16, f16 are supported)", name,
                                 dtype_name(t.dtype));
    }
  }
  return out;
}

// module.weight [rows, cols] dense, or MLX-quantized (module.weight packed uint32 +
// module.scales + module.biases).
Result<kernels::WeightMatrix> load_matrix(const ModelConfig& config, const WeightStore& store,
                                          const std::string& module, int64_t rows, int64_t cols,
                                          LlamaWeights& w) {
  const std::string name = module + ".weight";
  HEARTH_ASSIGN_OR_RETURN(TensorView t, store.get(name));
  kernels::WeightMatrix m;
  m.rows = rows;
  m.cols = cols;
  if (!store.contains(module + ".scales")) {
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
      return unsupported_error(
          "tensor '{}': dtype {} (f32, bf16, f16 or MLX-quantized U32 "
          "with .scales/.biases are supported)",
          name, dtype_name(t.dtype));
    }
    if (t.shape != Shape{rows, cols}) {
      return parse_error("tensor '{}': shape {} but the config implies [{}, {}]", name,
                         t.shape.to_string(), rows, cols);
    }
    m.dtype = t.dtype;
    HEARTH_ASSIGN_OR_RETURN(m.data, aligned_data(store, t, w));
    return m;
  }
  const QuantSpec spec = config.quantization.for_module(module);
  if (spec.bits == 0) {
    return parse_error(
        "tensor '{}' is quantized but config.json's quantization does not cover "
        "module '{}'",
        name, module);
  }
  if (t.dtype != DType::kU32 || t.shape != Shape{rows, cols * spec.bits / 32} ||
      cols % spec.group_size != 0) {
    return parse_error("tensor '{}': {} {} but {}-bit quantization of [{}, {}] needs U32 [{}, {}]",
                       name, dtype_name(t.dtype), t.shape.to_string(), spec.bits, rows, cols, rows,
                       cols * spec.bits / 32);
  }
  HEARTH_ASSIGN_OR_RETURN(TensorView scales, store.get(module + ".scales"));
  HEARTH_ASSIGN_OR_RETURN(TensorView biases, store.get(module + ".biases"));
  const Shape side{rows, cols / spec.group_size};
  for (const auto* s : {&scales, &biases}) {
    if (s->shape != side || s->dtype != scales.dtype ||
        (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16)) {
      return parse_error("tensor '{}.{}': {} {} but group size {} needs f32/bf16/f16 {}", module,
                         s == &scales ? "scales" : "biases", dtype_name(s->dtype),
                         s->shape.to_string(), spec.group_size, side.to_string());
    }
  }
  m.dtype = DType::kU32;
  m.bits = spec.bits;
  m.group_size = spec.group_size;
  m.scale_dtype = scales.dtype;
  HEARTH_ASSIGN_OR_RETURN(m.data, aligned_data(store, t, w));
  HEARTH_ASSIGN_OR_RETURN(m.scales, aligned_data(store, scales, w));
  HEARTH_ASSIGN_OR_RETURN(m.biases, aligned_data(store, biases, w));
  return m;
}

Result<Linear> load_linear(const ModelConfig& config, const WeightStore& store,
                           const std::string& module, int64_t out, int64_t in, bool bias,
                           LlamaWeights& w) {
  Linear l;
  HEARTH_ASSIGN_OR_RETURN(l.w, load_matrix(config, store, module, out, in, w));
  if (bias) {
    HEARTH_ASSIGN_OR_RETURN(l.bias, load_vector(store, module + ".bias", out));
  }
  return l;
}

}  // namespace

Result<LlamaWeights> load_llama_weights(const ModelConfig& c, const WeightStore& store) {
  LlamaWeights w;
  const int64_t hidden = c.hidden_size;
  HEARTH_ASSIGN_OR_RETURN(w.embed,
                          load_matrix(c, store, "model.embed_tokens", c.vocab_size, hidden, w));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    HEARTH_ASSIGN_OR_RETURN(w.lm_head, load_matrix(c, store, "lm_head", c.vocab_size, hidden, w));
  }
  HEARTH_ASSIGN_OR_RETURN(w.final_norm, load_vector(store, "model.norm.weight", hidden));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LlamaLayer layer;
    HEARTH_ASSIGN_OR_RETURN(layer.input_norm,
                            load_vector(store, p + "input_layernorm.weight", hidden));
    HEARTH_ASSIGN_OR_RETURN(layer.post_norm,
                            load_vector(store, p + "post_attention_layernorm.weight", hidden));
    if (c.qk_norm) {
      HEARTH_ASSIGN_OR_RETURN(layer.q_norm,
                              load_vector(store, p + "self_attn.q_norm.weight", c.head_dim));
      HEARTH_ASSIGN_OR_RETURN(layer.k_norm,
                              load_vector(store, p + "self_attn.k_norm.weight", c.head_dim));
    }
    HEARTH_ASSIGN_OR_RETURN(layer.q, load_linear(c, store, p + "self_attn.q_proj", c.q_dim(),
                                                 hidden, c.attention_bias, w));
    HEARTH_ASSIGN_OR_RETURN(layer.k, load_linear(c, store, p + "self_attn.k_proj", c.kv_dim(),
                                                 hidden, c.attention_bias, w));
    HEARTH_ASSIGN_OR_RETURN(layer.v, load_linear(c, store, p + "self_attn.v_proj", c.kv_dim(),
                                                 hidden, c.attention_bias, w));
    HEARTH_ASSIGN_OR_RETURN(
        layer.o, load_linear(c, store, p + "self_attn.o_proj", hidden, c.q_dim(), c.o_bias, w));
    HEARTH_ASSIGN_OR_RETURN(layer.gate, load_linear(c, store, p + "mlp.gate_proj",
                                                    c.intermediate_size, hidden, c.mlp_bias, w));
    HEARTH_ASSIGN_OR_RETURN(layer.up, load_linear(c, store, p + "mlp.up_proj", c.intermediate_size,
                                                  hidden, c.mlp_bias, w));
    HEARTH_ASSIGN_OR_RETURN(layer.down, load_linear(c, store, p + "mlp.down_proj", hidden,
                                                    c.intermediate_size, c.mlp_bias, w));
    w.layers.push_back(std::move(layer));
  }
  return w;
}

}  // namespace hearth
