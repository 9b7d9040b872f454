// hearth's own MLX affine quantizer (the base of the `convert` verb): the mlx-community
// 4/8-bit format, w ≈ scales * q + biases per group of `group_size` input columns, q
// packed little-endian into uint32 (element 0 in the low bits). The math follows
// mlx.core.quantize, so a model quantized here loads like one converted by mlx_lm.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/config.h"
#include "tensor/dtype.h"

namespace hearth {

struct QuantizedMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  QuantSpec spec;
  std::vector<uint32_t> packed;  // [rows, cols * bits / 32]
  std::vector<float> scales;     // [rows, cols / group_size]
  std::vector<float> biases;     // [rows, cols / group_size]
};

// Quantizes w [rows, cols] (f32). cols must be a multiple of spec.group_size.
Result<QuantizedMatrix> quantize_affine(const float* w, int64_t rows, int64_t cols, QuantSpec spec);

// Writes a quantized copy of the model in src_dir to dst_dir: every 2-D weight of a linear
// layer or embedding whose input dim divides by the group size is quantized (scales and
// biases stored as scale_dtype: kF32, kBF16 or kF16), the rest copied; config.json gains
// "quantization"; tokenizer and generation files are copied. `progress`, when set, is called
// before each tensor (tensors done so far, the total, its name) and once more before the
// output is written (done == total).
using QuantizeProgress = std::function<void(int done, int total, const std::string& name)>;
Status quantize_model_dir(const std::string& src_dir, const std::string& dst_dir, QuantSpec spec,
                          DType scale_dtype, const QuantizeProgress& progress = nullptr);

}  // namespace hearth
