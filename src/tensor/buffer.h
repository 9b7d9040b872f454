// Buffer: owning, 64-byte aligned host memory (activations, KV storage, converted
// weights). Move-only; zero-initialised so a fresh KV cache holds no garbage.
#pragma once

#include <cstddef>
#include <span>

#include "base/status.h"

namespace hearth {

class Buffer {
 public:
  static constexpr std::size_t kAlignment = 64;

  Buffer() = default;
  // Allocates `bytes` zeroed bytes; an error (not an abort) when the allocation fails.
  static Result<Buffer> allocate(std::size_t bytes);
  // As allocate, but the bytes are left as the allocator gives them: for a caller that writes
  // every byte before anything reads it (a converted weight copy filled on many threads, whose
  // first touch then happens there instead of in one thread's memset).
  static Result<Buffer> allocate_for_overwrite(std::size_t bytes);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t size() const { return size_; }
  template <typename T>
  std::span<T> as() {
    return {static_cast<T*>(data_), size_ / sizeof(T)};
  }
  template <typename T>
  std::span<const T> as() const {
    return {static_cast<const T*>(data_), size_ / sizeof(T)};
  }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace hearth
