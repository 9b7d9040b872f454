// Safetensors header reading (see safetensors_header.h). The header is untrusted: its
// length is capped and every field is type-checked.
#include "hub/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace hearth::hub {

std::uint64_t TensorHeader::elements() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

Result<std::vector<TensorHeader>> read_safetensors_header(const std::filesystem::path& path) {
  constexpr std::uint64_t kMaxHeader = 100 * 1024 * 1024;
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("{}: cannot open", path.string());
  unsigned char len_bytes[8];
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8)) {
    return parse_error("{}: shorter than a safetensors header", path.string());
  }
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  if (len == 0 || len > kMaxHeader) {
    return parse_error("{}: implausible safetensors header length {}", path.string(), len);
  }
  std::string text(len, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(len))) {
    return parse_error("{}: truncated safetensors header", path.string());
  }
  auto json = nlohmann::json::parse(text, nullptr, false);
  if (!json.is_object()) return parse_error("{}: safetensors header is not JSON", path.string());
  std::vector<TensorHeader> tensors;
  for (const auto& [name, t] : json.items()) {
    if (name == "__metadata__") continue;
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2) {
      return parse_error("{}: tensor '{}' has a malformed header entry", path.string(), name);
    }
    TensorHeader h;
    h.name = name;
    h.dtype = t["dtype"].get<std::string>();
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) {
        return parse_error("{}: tensor '{}' has a malformed shape", path.string(), name);
      }
      h.shape.push_back(d.get<std::uint64_t>());
    }
    const auto& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
        off[1].get<std::uint64_t>() < off[0].get<std::uint64_t>()) {
      return parse_error("{}: tensor '{}' has malformed data_offsets", path.string(), name);
    }
    h.bytes = off[1].get<std::uint64_t>() - off[0].get<std::uint64_t>();
    tensors.push_back(std::move(h));
  }
  return tensors;
}

}  // namespace hearth::hub
