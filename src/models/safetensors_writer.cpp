// Safetensors writer: JSON header + concatenated little-endian tensor bytes.
#include "models/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace hearth {

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const uint64_t expected = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    if (t.bytes.size() != expected) {
      return internal_error("tensor '{}': {} bytes for shape {}", t.name, t.bytes.size(),
                            t.shape.to_string());
    }
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape.dims()},
                      {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return io_error("cannot create {}", path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 &&
            std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  for (const auto& t : tensors) {
    ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f.get()) == t.bytes.size();
  }
  if (!ok) return io_error("writing {} failed", path);
  return ok_status();
}

}  // namespace hearth
