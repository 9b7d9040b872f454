// MLX affine quantizer and the model-directory converter built on it.
#include "models/quantize.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "base/mapped_file.h"
#include "models/safetensors.h"
#include "models/safetensors_writer.h"
#include "tensor/tensor_view.h"

namespace hearth {
namespace {

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::kBF16:
        out[i] = bf16_to_f32(t.as<uint16_t>()[i]);
        break;
      case DType::kF16:
        out[i] = f16_to_f32(t.as<uint16_t>()[i]);
        break;
      default:
        std::memcpy(&out[i], t.as<uint8_t>() + i * 4, 4);
    }
  }
  return out;
}

std::vector<uint8_t> encode(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> out(v.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + i * 4, &v[i], 4);
    } else {
      uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

bool is_quantizable(const std::string& name, const TensorView& t, int group_size) {
  const std::string suffix = ".weight";
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  if (name.find("norm") != std::string::npos) return false;
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) return false;
  return t.shape.rank() == 2 && t.shape[1] % group_size == 0;
}

}  // namespace

Result<QuantizedMatrix> quantize_affine(const float* w, int64_t rows, int64_t cols,
                                        QuantSpec spec) {
  if ((spec.bits != 4 && spec.bits != 8) || spec.group_size <= 0 || cols % spec.group_size != 0) {
    return invalid_argument_error("cannot quantize [{}, {}] with {} bits, group {}", rows, cols,
                                  spec.bits, spec.group_size);
  }
  QuantizedMatrix out;
  out.rows = rows;
  out.cols = cols;
  out.spec = spec;
  const int64_t groups = cols / spec.group_size;
  const int per_word = 32 / spec.bits;
  out.packed.assign(static_cast<std::size_t>(rows * cols / per_word), 0u);
  out.scales.resize(static_cast<std::size_t>(rows * groups));
  out.biases.resize(static_cast<std::size_t>(rows * groups));
  const float n_bins = static_cast<float>((1 << spec.bits) - 1);
  const float eps = 1e-7f;
  // Rows are independent (a row's packed words are its own: cols is a multiple of the group
  // size, itself a multiple of the values per word), so row ranges go to threads.
  auto quantize_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const float* x = w + r * cols + g * spec.group_size;
        float w_max = x[0];
        float w_min = x[0];
        for (int i = 1; i < spec.group_size; ++i) {
          w_max = std::max(w_max, x[i]);
          w_min = std::min(w_min, x[i]);
        }
        // As mlx.core.quantize: anchor the grid at the edge of larger magnitude so that it
        // is represented exactly, and keep zero-width groups finite.
        const bool min_is_edge = std::fabs(w_min) > std::fabs(w_max);
        float scale = std::max((w_max - w_min) / n_bins, eps);
        if (!min_is_edge) scale = -scale;
        const float edge = min_is_edge ? w_min : w_max;
        const float q0 = std::nearbyint(edge / scale);
        if (q0 != 0.0f) scale = edge / q0;
        const float bias = q0 == 0.0f ? 0.0f : edge;
        out.scales[r * groups + g] = scale;
        out.biases[r * groups + g] = bias;
        for (int i = 0; i < spec.group_size; ++i) {
          float q = std::nearbyint((x[i] - bias) / scale);
          q = std::clamp(q, 0.0f, n_bins);
          const int64_t c = g * spec.group_size + i;
          out.packed[(r * cols + c) / per_word] |= static_cast<uint32_t>(q)
                                                   << ((c % per_word) * spec.bits);
        }
      }
    }
  };
  const int64_t min_rows_per_thread = 64;
  const int64_t threads = std::clamp<int64_t>(rows / min_rows_per_thread, 1,
                                              std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  const int64_t per_thread = (rows + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t r0 = t * per_thread;
    const int64_t r1 = std::min(rows, r0 + per_thread);
    if (r0 < r1) pool.emplace_back(quantize_rows, r0, r1);
  }
  quantize_rows(0, std::min(rows, per_thread));
  for (std::thread& th : pool) th.join();
  return out;
}

Status quantize_model_dir(const std::string& src_dir, const std::string& dst_dir, QuantSpec spec,
                          DType scale_dtype, const QuantizeProgress& progress) {
  namespace fs = std::filesystem;
  HEARTH_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open(src_dir));
  HEARTH_ASSIGN_OR_RETURN(std::string config_text,
                          read_file((fs::path(src_dir) / "config.json").string()));
  nlohmann::json config = nlohmann::json::parse(config_text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return parse_error("{}/config.json: invalid JSON", src_dir);
  }
  std::error_code ec;
  fs::create_directories(dst_dir, ec);
  if (ec) return io_error("cannot create {}: {}", dst_dir, ec.message());

  std::vector<TensorToWrite> out;
  const std::vector<std::string> names = store.names();
  int done = 0;
  for (const std::string& name : names) {
    HEARTH_ASSIGN_OR_RETURN(TensorView t, store.get(name));
    if (progress) progress(done++, static_cast<int>(names.size()), name);
    if (!is_quantizable(name, t, spec.group_size)) {
      TensorToWrite copy{name, t.dtype, t.shape, {}};
      copy.bytes.assign(t.as<uint8_t>(), t.as<uint8_t>() + t.nbytes());
      out.push_back(std::move(copy));
      continue;
    }
    const std::vector<float> w = to_f32(t);
    HEARTH_ASSIGN_OR_RETURN(QuantizedMatrix q,
                            quantize_affine(w.data(), t.shape[0], t.shape[1], spec));
    const std::string module = name.substr(0, name.size() - 7);
    TensorToWrite packed{name, DType::kU32, Shape{q.rows, q.cols * spec.bits / 32}, {}};
    packed.bytes.resize(q.packed.size() * 4);
    std::memcpy(packed.bytes.data(), q.packed.data(), packed.bytes.size());
    const Shape side{q.rows, q.cols / spec.group_size};
    out.push_back(std::move(packed));
    out.push_back({module + ".scales", scale_dtype, side, encode(q.scales, scale_dtype)});
    out.push_back({module + ".biases", scale_dtype, side, encode(q.biases, scale_dtype)});
  }
  if (progress) progress(done, done, "model.safetensors");
  HEARTH_RETURN_IF_ERROR(write_safetensors((fs::path(dst_dir) / "model.safetensors").string(), out,
                                           {{"format", "mlx"}}));
  nlohmann::json q = {{"group_size", spec.group_size}, {"bits", spec.bits}};
  config["quantization"] = q;
  config["quantization_config"] = q;
  {
    std::string text = config.dump(2);
    std::unique_ptr<FILE, int (*)(FILE*)> f(
        std::fopen((fs::path(dst_dir) / "config.json").c_str(), "wb"), &std::fclose);
    if (!f || std::fwrite(text.data(), 1, text.size(), f.get()) != text.size()) {
      return io_error("cannot write {}/config.json", dst_dir);
    }
  }
  for (const char* extra : {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                            "chat_template.jinja", "chat_template.json", "special_tokens_map.json",
                            "added_tokens.json", "tokenizer.model", "vocab.json", "merges.txt"}) {
    const fs::path p = fs::path(src_dir) / extra;
    if (fs::is_regular_file(p)) {
      fs::copy_file(p, fs::path(dst_dir) / extra, fs::copy_options::overwrite_existing, ec);
      if (ec) return io_error("cannot copy {}: {}", p.string(), ec.message());
    }
  }
  return ok_status();
}

}  // namespace hearth
