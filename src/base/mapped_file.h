// A read-only memory-mapped file: weights and tokenizer files are read in place, so a
// 16 GB model costs page cache, not a copy. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace hearth {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to an empty span.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Hints the kernel to read the whole mapping ahead (weights about to be uploaded).
  void advise_sequential() const;
  // Drops the whole pages inside [p, p + n) from this process's resident set (MADV_DONTNEED:
  // the mapping is read-only, so its pages are clean and a later touch reads them in again).
  // Returns the bytes dropped: 0 when the range is not inside this mapping, holds no whole
  // page, or the kernel refused.
  std::size_t drop_pages(const void* p, std::size_t n) const;

 private:
  void reset();

  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) file into a string.
Result<std::string> read_file(const std::string& path);

}  // namespace hearth
