// Writes safetensors files (quantize/convert output, test fixtures made in C++).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace hearth {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;  // shape.numel() * dtype_size(dtype)
};

// Tensors are written in the order given; the header is padded to 8 bytes.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata);

}  // namespace hearth
