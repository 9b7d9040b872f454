// Safetensors header validation and the mapped weight store.
#include "models/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <limits>

namespace hearth {
namespace {

using nlohmann::json;

// Headers above this are refused before parsing (real ones are well under 10 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& value,
                                     uint64_t data_size) {
  SafetensorsEntry e;
  e.name = name;
  if (!value.is_object()) return parse_error("tensor '{}': entry is not an object", name);
  auto dt = value.find("dtype");
  if (dt == value.end() || !dt->is_string()) {
    return parse_error("tensor '{}': missing dtype", name);
  }
  auto dtype = dtype_from_safetensors(dt->get<std::string>());
  if (!dtype) {
    return unsupported_error("tensor '{}': dtype '{}' is not supported", name,
                             dt->get<std::string>());
  }
  e.dtype = *dtype;
  auto sh = value.find("shape");
  if (sh == value.end() || !sh->is_array() || sh->size() > 8) {
    return parse_error("tensor '{}': shape must be an array of at most 8 dims", name);
  }
  std::vector<int64_t> dims;
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) return parse_error("tensor '{}': shape has a bad dim", name);
    uint64_t v = d.get<uint64_t>();
    if (v > (1ull << 40) || (v != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / v)) {
      return parse_error("tensor '{}': shape is too large", name);
    }
    numel *= v;
    dims.push_back(static_cast<int64_t>(v));
  }
  e.shape = Shape(std::move(dims));
  auto off = value.find("data_offsets");
  if (off == value.end() || !off->is_array() || off->size() != 2 ||
      !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
    return parse_error("tensor '{}': data_offsets must be two non-negative integers", name);
  }
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_size) {
    return parse_error("tensor '{}': data_offsets [{}, {}] outside the {} data bytes of the file",
                       name, e.begin, e.end, data_size);
  }
  if (e.end - e.begin != numel * dtype_size(e.dtype)) {
    return parse_error("tensor '{}': {} bytes for shape {} of {} (expected {})", name,
                       e.end - e.begin, e.shape.to_string(), dtype_name(e.dtype),
                       numel * dtype_size(e.dtype));
  }
  return e;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> file) {
  if (file.size() < 8) return parse_error("file of {} bytes is too short", file.size());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[static_cast<std::size_t>(i)];
  if (header_len > kMaxHeaderBytes || header_len > file.size() - 8) {
    return parse_error("header length {} exceeds the file ({} bytes)", header_len, file.size());
  }
  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = file.size() - header.data_offset;
  const auto* begin = reinterpret_cast<const char*>(file.data() + 8);
  json j = json::parse(begin, begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return parse_error("header is not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return parse_error("__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (mv.is_string()) header.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    HEARTH_ASSIGN_OR_RETURN(auto entry, parse_entry(key, value, data_size));
    header.tensors.push_back(std::move(entry));
  }
  // No two tensors may share bytes.
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& e : header.tensors) {
    if (e.end > e.begin) sorted.push_back(&e);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      return parse_error("tensors '{}' and '{}' overlap", sorted[i - 1]->name, sorted[i]->name);
    }
  }
  return header;
}

Status WeightStore::add_file(const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  auto header = parse_safetensors_header(file.bytes());
  if (!header.ok()) return header.status().with_context(path);
  const std::size_t index = files_.size();
  for (auto& e : header->tensors) {
    if (index_.contains(e.name)) {
      return parse_error("{}: tensor '{}' also appears in another shard", path, e.name);
    }
    std::string name = e.name;
    index_[name] = Location{index, std::move(e)};
  }
  data_offsets_.push_back(header->data_offset);
  files_.push_back(std::move(file));
  return ok_status();
}

Result<WeightStore> WeightStore::open_file(const std::string& path) {
  WeightStore store;
  HEARTH_RETURN_IF_ERROR(store.add_file(path));
  return store;
}

Result<WeightStore> WeightStore::open(const std::string& dir) {
  namespace fs = std::filesystem;
  WeightStore store;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::is_regular_file(index_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_file(index_path.string()));
    json j = json::parse(text, nullptr, false);
    auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (j.is_discarded() || !j.is_object() || wm == j.end() || !wm->is_object()) {
      return parse_error("{}: no weight_map object", index_path.string());
    }
    std::vector<std::string> shards;
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string())
        return parse_error("{}: bad shard for '{}'", index_path.string(), name);
      std::string s = shard.get<std::string>();
      if (s.find('/') != std::string::npos || s.find("..") != std::string::npos) {
        return parse_error("{}: shard name '{}' leaves the model directory", index_path.string(),
                           s);
      }
      if (std::find(shards.begin(), shards.end(), s) == shards.end()) shards.push_back(s);
    }
    std::sort(shards.begin(), shards.end());
    for (const auto& s : shards) {
      const fs::path p = fs::path(dir) / s;
      if (!fs::is_regular_file(p)) {
        return not_found_error("{}: shard {} is missing", index_path.string(), s);
      }
      HEARTH_RETURN_IF_ERROR(store.add_file(p.string()));
    }
    for (const auto& [name, shard] : wm->items()) {
      auto it = store.index_.find(name);
      if (it == store.index_.end() ||
          fs::path(store.files_[it->second.file].path()).filename() != shard.get<std::string>()) {
        return parse_error("{}: tensor '{}' is not in shard {}", index_path.string(), name,
                           shard.get<std::string>());
      }
    }
    return store;
  }
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file()) {
      paths.push_back(entry.path().string());
    }
  }
  if (ec) return io_error("cannot list {}: {}", dir, ec.message());
  if (paths.empty()) return not_found_error("{}: no *.safetensors weights", dir);
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) HEARTH_RETURN_IF_ERROR(store.add_file(p));
  return store;
}

Result<TensorView> WeightStore::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return not_found_error("tensor '{}' is missing from the weights", name);
  const Location& loc = it->second;
  TensorView view;
  view.data = files_[loc.file].data() + data_offsets_[loc.file] + loc.entry.begin;
  view.dtype = loc.entry.dtype;
  view.shape = loc.entry.shape;
  return view;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, loc] : index_) out.push_back(name);
  return out;
}

std::size_t WeightStore::total_bytes() const {
  std::size_t total = 0;
  for (const auto& f : files_) total += f.size();
  return total;
}

std::size_t WeightStore::drop_pages(const void* p, std::size_t n) const {
  for (const auto& f : files_) {
    if (const std::size_t dropped = f.drop_pages(p, n); dropped > 0) return dropped;
  }
  return 0;
}

}  // namespace hearth
