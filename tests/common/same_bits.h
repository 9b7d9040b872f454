// Bit-for-bit comparison of float results for the batch-invariance tests: the first `count`
// floats of a and b (memcmp per element, so -0 / +0 and NaN payloads count), or the first
// that differs, by its row and column in a row-major result of `cols` columns.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace hearth::tests {

inline ::testing::AssertionResult same_bits(const std::vector<float>& a,
                                            const std::vector<float>& b, int64_t count,
                                            int64_t cols) {
  for (int64_t k = 0; k < count; ++k) {
    if (std::memcmp(&a[k], &b[k], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "row " << k / cols << " column " << k % cols << ": " << a[k] << " vs " << b[k];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace hearth::tests
