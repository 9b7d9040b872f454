// Reads only the JSON header of a .safetensors file (names, dtypes, shapes), without
// touching the tensor bytes: what `ls` and `fit` need to count parameters and weights.
// Loading weights is the models layer's job (models/safetensors.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::hub {

struct TensorHeader {
  std::string name;
  std::string dtype;  // "BF16", "F32", "U32", ...
  std::vector<std::uint64_t> shape;
  std::uint64_t bytes = 0;  // data_offsets end - begin
  std::uint64_t elements() const;
};

Result<std::vector<TensorHeader>> read_safetensors_header(const std::filesystem::path& path);

}  // namespace hearth::hub
