// TensorView: a non-owning, dense row-major view of typed memory (a mapped weight, a
// Buffer, a slice of activations). Whoever owns the bytes keeps them alive.
#pragma once

#include <cstddef>

#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace hearth {

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

}  // namespace hearth
