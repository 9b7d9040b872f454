// make_random_model: writes a random-init llama-family model directory (config.json +
// model.safetensors, bf16 or f32) through hearth's own safetensors writer, for CPU speed
// measurements on machines without Python (the ~50M-parameter model of benchmarks/RESULTS.md).
//
//   make_random_model <out-dir> [--hidden 640] [--layers 8] [--heads 10] [--kv-heads 5]
//                     [--intermediate 1792] [--vocab 16384] [--dtype bf16|f32] [--seed 1]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "models/safetensors_writer.h"
#include "tensor/dtype.h"

namespace {

struct Shape2 {
  int64_t rows;
  int64_t cols;
};

struct Options {
  std::string out;
  int hidden = 640;
  int layers = 8;
  int heads = 10;
  int kv_heads = 5;
  int intermediate = 1792;
  int vocab = 16384;
  std::string dtype = "bf16";
  uint64_t seed = 1;
};

hearth::TensorToWrite make_tensor(const std::string& name, Shape2 shape, bool ones,
                                  hearth::DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t n = shape.rows * shape.cols;
  hearth::TensorToWrite t;
  t.name = name;
  t.dtype = dtype;
  t.shape = shape.rows == 1 ? hearth::Shape({shape.cols}) : hearth::Shape({shape.rows, shape.cols});
  t.bytes.resize(static_cast<std::size_t>(n) * hearth::dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float v = ones ? 1.0f : normal(rng);
    if (dtype == hearth::DType::kBF16) {
      const uint16_t b = hearth::f32_to_bf16(v);
      std::memcpy(t.bytes.data() + i * 2, &b, 2);
    } else {
      std::memcpy(t.bytes.data() + i * 4, &v, 4);
    }
  }
  return t;
}

int run(const Options& o) {
  const hearth::DType dtype = o.dtype == "f32" ? hearth::DType::kF32 : hearth::DType::kBF16;
  const int head_dim = o.hidden / o.heads;
  std::filesystem::create_directories(o.out);
  std::mt19937_64 rng(o.seed);
  std::vector<hearth::TensorToWrite> tensors;
  const int64_t h = o.hidden, q = int64_t{o.heads} * head_dim, kv = int64_t{o.kv_heads} * head_dim;
  tensors.push_back(make_tensor("model.embed_tokens.weight", {o.vocab, h}, false, dtype, rng));
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    tensors.push_back(make_tensor(p + "input_layernorm.weight", {1, h}, true, dtype, rng));
    tensors.push_back(make_tensor(p + "post_attention_layernorm.weight", {1, h}, true, dtype, rng));
    tensors.push_back(make_tensor(p + "self_attn.q_proj.weight", {q, h}, false, dtype, rng));
    tensors.push_back(make_tensor(p + "self_attn.k_proj.weight", {kv, h}, false, dtype, rng));
    tensors.push_back(make_tensor(p + "self_attn.v_proj.weight", {kv, h}, false, dtype, rng));
    tensors.push_back(make_tensor(p + "self_attn.o_proj.weight", {h, q}, false, dtype, rng));
    tensors.push_back(
        make_tensor(p + "mlp.gate_proj.weight", {o.intermediate, h}, false, dtype, rng));
    tensors.push_back(
        make_tensor(p + "mlp.up_proj.weight", {o.intermediate, h}, false, dtype, rng));
    tensors.push_back(
        make_tensor(p + "mlp.down_proj.weight", {h, o.intermediate}, false, dtype, rng));
  }
  tensors.push_back(make_tensor("model.norm.weight", {1, h}, true, dtype, rng));
  int64_t params = 0;
  for (const auto& t : tensors) params += t.shape.numel();
  hearth::Status st =
      hearth::write_safetensors(o.out + "/model.safetensors", tensors, {{"format", "pt"}});
  if (!st.ok()) {
    std::fprintf(stderr, "make_random_model: %s\n", st.message().c_str());
    return 1;
  }
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                           {"model_type", "llama"},
                           {"vocab_size", o.vocab},
                           {"hidden_size", o.hidden},
                           {"intermediate_size", o.intermediate},
                           {"num_hidden_layers", o.layers},
                           {"num_attention_heads", o.heads},
                           {"num_key_value_heads", o.kv_heads},
                           {"head_dim", head_dim},
                           {"hidden_act", "silu"},
                           {"max_position_embeddings", 4096},
                           {"rms_norm_eps", 1e-5},
                           {"rope_theta", 500000.0},
                           {"tie_word_embeddings", true},
                           {"attention_bias", false},
                           {"mlp_bias", false},
                           {"torch_dtype", o.dtype == "f32" ? "float32" : "bfloat16"},
                           {"bos_token_id", 1},
                           {"eos_token_id", 2}};
  std::ofstream(o.out + "/config.json") << config.dump(2) << "\n";
  std::printf("%s: %lld parameters, %s\n", o.out.c_str(), static_cast<long long>(params),
              o.dtype.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Write a random-init llama-family model directory"};
  app.add_option("out", o.out, "Output directory")->required();
  app.add_option("--hidden", o.hidden)->capture_default_str();
  app.add_option("--layers", o.layers)->capture_default_str();
  app.add_option("--heads", o.heads)->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads)->capture_default_str();
  app.add_option("--intermediate", o.intermediate)->capture_default_str();
  app.add_option("--vocab", o.vocab)->capture_default_str();
  app.add_option("--dtype", o.dtype)->check(CLI::IsMember({"bf16", "f32"}))->capture_default_str();
  app.add_option("--seed", o.seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
