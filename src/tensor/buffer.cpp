// Aligned host allocation for Buffer.
#include "tensor/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace hearth {

Result<Buffer> Buffer::allocate_for_overwrite(std::size_t bytes) {
  Buffer buffer;
  if (bytes == 0) return buffer;
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) return out_of_memory_error("cannot allocate {} bytes of host memory", bytes);
  buffer.data_ = p;
  buffer.size_ = bytes;
  return buffer;
}

Result<Buffer> Buffer::allocate(std::size_t bytes) {
  HEARTH_ASSIGN_OR_RETURN(Buffer buffer, allocate_for_overwrite(bytes));
  if (buffer.data_ != nullptr) {
    std::memset(buffer.data_, 0, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }
  return buffer;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Buffer::~Buffer() { std::free(data_); }

}  // namespace hearth
