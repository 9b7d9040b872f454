// The MLX affine quantizer: a matrix quantized in one call (row ranges on several threads)
// equals the same rows quantized one at a time, and a group on an exact grid round-trips.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "models/quantize.h"

namespace hearth {
namespace {

TEST(QuantizeAffine, ThreadedRowsEqualRowByRow) {
  for (int bits : {4, 8}) {
    const int64_t rows = 1031;  // several threads' worth of rows, not a multiple of any split
    const int64_t cols = 192;
    QuantSpec spec{bits, 64};
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.05f);
    std::vector<float> w(static_cast<std::size_t>(rows * cols));
    for (float& v : w) v = dist(rng);
    auto whole = quantize_affine(w.data(), rows, cols, spec);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    const int64_t words = cols * bits / 32;
    const int64_t groups = cols / 64;
    for (int64_t r = 0; r < rows; ++r) {
      auto one = quantize_affine(w.data() + r * cols, 1, cols, spec);
      ASSERT_TRUE(one.ok());
      for (int64_t i = 0; i < words; ++i) {
        ASSERT_EQ(whole->packed[r * words + i], one->packed[i]) << "bits " << bits << " row " << r;
      }
      for (int64_t g = 0; g < groups; ++g) {
        ASSERT_EQ(whole->scales[r * groups + g], one->scales[g]);
        ASSERT_EQ(whole->biases[r * groups + g], one->biases[g]);
      }
    }
  }
}

TEST(QuantizeAffine, ExactGridRoundTrips) {
  // Values -1 + k/10 for k = 0..15 repeated: the grid is anchored at the edge of larger
  // magnitude (-1), step 0.1, so every value is a grid point.
  std::vector<float> w(64);
  for (int i = 0; i < 64; ++i) w[i] = -1.0f + static_cast<float>(i % 16) / 10.0f;
  auto q = quantize_affine(w.data(), 1, 64, QuantSpec{4, 64});
  ASSERT_TRUE(q.ok());
  for (int i = 0; i < 64; ++i) {
    const uint32_t code = (q->packed[i / 8] >> ((i % 8) * 4)) & 15u;
    EXPECT_NEAR(q->scales[0] * static_cast<float>(code) + q->biases[0], w[i], 1e-5f) << i;
  }
}

TEST(QuantizeAffine, BadSpecIsAnError) {
  std::vector<float> w(100, 0.5f);
  EXPECT_FALSE(quantize_affine(w.data(), 1, 100, QuantSpec{4, 64}).ok());
  EXPECT_FALSE(quantize_affine(w.data(), 1, 64, QuantSpec{3, 64}).ok());
}

}  // namespace
}  // namespace hearth
