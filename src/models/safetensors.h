// Safetensors reading: the header parser (untrusted bytes: every offset, dtype and shape is
// checked against the file before anything is read; fuzzed by tests/models/fuzz_*) and a
// memory-mapped store over one file or a sharded model.safetensors.index.json set.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/tensor_view.h"

namespace hearth {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

// Parses and validates the header of a safetensors file whose complete bytes are `file`.
// Errors name the tensor at fault.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> file);

// A set of mapped safetensors files addressed by tensor name.
class WeightStore {
 public:
  // dir/model.safetensors.index.json when present (every shard it names must exist and
  // hold the tensors it says), else every dir/*.safetensors.
  static Result<WeightStore> open(const std::string& dir);
  // One file (tests, tools).
  static Result<WeightStore> open_file(const std::string& path);

  bool contains(const std::string& name) const { return index_.contains(name); }
  // The tensor's bytes in place; an error naming it when absent.
  Result<TensorView> get(const std::string& name) const;
  std::vector<std::string> names() const;
  std::size_t total_bytes() const;
  // MappedFile::drop_pages on the file whose mapping holds [p, p + n); 0 when none does.
  std::size_t drop_pages(const void* p, std::size_t n) const;

 private:
  Status add_file(const std::string& path);

  struct Location {
    std::size_t file = 0;
    SafetensorsEntry entry;
  };
  std::vector<MappedFile> files_;
  std::vector<uint64_t> data_offsets_;
  std::map<std::string, Location> index_;
};

}  // namespace hearth
