// Shape: the dimensions of a tensor, outermost first ([rows, cols] for a weight matrix).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace hearth {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // Product of the dims (1 for rank 0); callers validate dims are non-negative first.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  bool operator==(const Shape&) const = default;
  // "[2, 3]"
  std::string to_string() const;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace hearth
