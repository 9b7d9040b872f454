// RoPE frequencies (every scaling type) and the fused RoPE + QKV split + paged KV write
// kernel against kernels/ref::rope applied to the same (optionally normalized) heads.
#include <cmath>
#include <numbers>

#include "kernels/cuda/rope_frequencies.h"
#include "kernels/cuda/rope_kv_write.cuh"
#include "kernels/ref/ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

using Bf16 = __nv_bfloat16;

TEST(RopeFrequenciesTest, DefaultAndLinear) {
  auto table = rope_frequencies(10000.0, 128, {});
  ASSERT_TRUE(table.ok());
  ASSERT_EQ(table->inv_freq.size(), 64u);
  EXPECT_FLOAT_EQ(table->inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(table->inv_freq[32], static_cast<float>(1.0 / std::pow(10000.0, 0.5)));
  RopeScaling linear;
  linear.type = RopeType::kLinear;
  linear.factor = 4.0;
  auto scaled = rope_frequencies(10000.0, 128, linear);
  ASSERT_TRUE(scaled.ok());
  EXPECT_FLOAT_EQ(scaled->inv_freq[10], table->inv_freq[10] / 4.0f);
  EXPECT_FALSE(rope_frequencies(10000.0, 127, {}).ok());
}

// Llama 3.1's parameters: high frequencies (short wavelengths) unchanged, low ones divided
// by the factor, the band between interpolated smoothly and monotonically.
TEST(RopeFrequenciesTest, Llama3Bands) {
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position = 8192;
  auto base = rope_frequencies(500000.0, 128, {});
  auto table = rope_frequencies(500000.0, 128, s);
  ASSERT_TRUE(table.ok() && base.ok());
  for (int i = 0; i < 64; ++i) {
    double wavelen = 2.0 * std::numbers::pi / base->inv_freq[i];
    if (wavelen < 8192.0 / 4.0) {
      EXPECT_FLOAT_EQ(table->inv_freq[i], base->inv_freq[i]);
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(table->inv_freq[i], base->inv_freq[i] / 8.0f);
    } else {
      EXPECT_LE(table->inv_freq[i], base->inv_freq[i]);
      EXPECT_GE(table->inv_freq[i], base->inv_freq[i] / 8.0f);
    }
    if (i > 0) {
      EXPECT_LT(table->inv_freq[i], table->inv_freq[i - 1]);
    }
  }
}

// YaRN: mscale 0.1 ln(factor) + 1; the first dims extrapolate (unchanged), the last
// interpolate (divided by the factor).
TEST(RopeFrequenciesTest, YarnRampAndAttentionFactor) {
  RopeScaling s;
  s.type = RopeType::kYarn;
  s.factor = 4.0;
  s.original_max_position = 32768;
  auto base = rope_frequencies(1000000.0, 128, {});
  auto table = rope_frequencies(1000000.0, 128, s);
  ASSERT_TRUE(table.ok() && base.ok());
  EXPECT_NEAR(table->attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-6);
  EXPECT_FLOAT_EQ(table->inv_freq[0], base->inv_freq[0]);
  EXPECT_FLOAT_EQ(table->inv_freq[63], base->inv_freq[63] / 4.0f);
  s.attention_factor = 1.0;
  EXPECT_FLOAT_EQ(rope_frequencies(1000000.0, 128, s)->attention_scaling, 1.0f);
}

struct RopeCase {
  int head_dim, rotary_dim, q_heads, kv_heads;
  bool qk_norm;
  RopeType type;
};
class RopeKvWriteTest : public CudaTest, public ::testing::WithParamInterface<RopeCase> {};

// Tolerance: f32 math with one bf16 rounding of each output; angles agree to ~1e-7
// relative, so outputs are within one bf16 ulp (2^-8 relative) plus 1e-3 absolute for
// elements that nearly cancel.
TEST_P(RopeKvWriteTest, RotatesQAndWritesCacheSlots) {
  const RopeCase c = GetParam();
  const int tokens = 5;
  const int total_heads = c.q_heads + 2 * c.kv_heads;
  const int64_t ld_qkv = static_cast<int64_t>(total_heads) * c.head_dim + 8;
  const int64_t ld_q = static_cast<int64_t>(c.q_heads) * c.head_dim + 16;
  const int num_slots = 64;
  std::vector<int32_t> positions = {0, 1, 7, 769, 5125};
  std::vector<int64_t> slots = {3, 40, -1, 17, 63};
  RopeScaling scaling;
  scaling.type = c.type;
  scaling.factor = 8.0;
  auto table = rope_frequencies(500000.0, c.rotary_dim, scaling);
  ASSERT_TRUE(table.ok());

  auto qkv = random_bf16_values(tokens * ld_qkv, 51);
  auto q_norm = random_bf16_values(c.head_dim, 52, 0.3f);
  auto k_norm = random_bf16_values(c.head_dim, 53, 0.3f);
  DeviceBuffer dqkv = upload(to_bf16(qkv));
  DeviceBuffer dpos = upload(positions);
  DeviceBuffer dslots = upload(slots);
  DeviceBuffer dfreq = upload(table->inv_freq);
  DeviceBuffer dqn = upload(to_bf16(q_norm));
  DeviceBuffer dkn = upload(to_bf16(k_norm));
  DeviceBuffer dq = poisoned<Bf16>(tokens * ld_q);
  size_t cache_elems = static_cast<size_t>(num_slots) * c.kv_heads * c.head_dim;
  DeviceBuffer dk = poisoned<Bf16>(cache_elems);
  DeviceBuffer dv = poisoned<Bf16>(cache_elems);

  RopeKvWriteArgs args;
  args.qkv = dqkv.as<Bf16>();
  args.ld_qkv = ld_qkv;
  args.positions = dpos.as<int32_t>();
  args.slots = dslots.as<int64_t>();
  args.inv_freq = dfreq.as<float>();
  args.attention_scaling = table->attention_scaling;
  args.q_norm = c.qk_norm ? dqn.as<Bf16>() : nullptr;
  args.k_norm = c.qk_norm ? dkn.as<Bf16>() : nullptr;
  args.q_out = dq.as<Bf16>();
  args.ld_q_out = ld_q;
  args.k_cache = dk.as<Bf16>();
  args.v_cache = dv.as<Bf16>();
  args.tokens = tokens;
  args.q_heads = c.q_heads;
  args.kv_heads = c.kv_heads;
  args.head_dim = c.head_dim;
  args.rotary_dim = c.rotary_dim;
  ASSERT_EQ(rope_kv_write(args, ctx_->stream()), cudaSuccess);
  auto q_out = from_bf16(download<Bf16>(dq, tokens * ld_q));
  auto k_cache = from_bf16(download<Bf16>(dk, cache_elems));
  auto v_cache = from_bf16(download<Bf16>(dv, cache_elems));

  // Reference: normalize (f32), then ref::rope over the rotated part of each head.
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < c.q_heads + c.kv_heads; ++h) {
      bool is_q = h < c.q_heads;
      std::vector<float> head(c.head_dim);
      double sum_sq = 0.0;
      for (int i = 0; i < c.head_dim; ++i) {
        head[i] = qkv[t * ld_qkv + h * c.head_dim + i];
        sum_sq += static_cast<double>(head[i]) * head[i];
      }
      if (c.qk_norm) {
        double inv = 1.0 / std::sqrt(sum_sq / c.head_dim + 1e-6);
        const auto& w = is_q ? q_norm : k_norm;
        for (int i = 0; i < c.head_dim; ++i) head[i] = static_cast<float>(head[i] * inv * w[i]);
      }
      std::vector<float> rotated(head.begin(), head.begin() + c.rotary_dim);
      kernels::ref::rope(rotated.data(), &positions[t], 1, 1, c.rotary_dim, table->inv_freq.data(),
                         table->attention_scaling);
      std::copy(rotated.begin(), rotated.end(), head.begin());
      if (!is_q && slots[t] < 0) continue;
      for (int i = 0; i < c.head_dim; ++i) {
        float got = is_q ? q_out[t * ld_q + h * c.head_dim + i]
                         : k_cache[(slots[t] * c.kv_heads + (h - c.q_heads)) * c.head_dim + i];
        ASSERT_NEAR(got, head[i], std::abs(head[i]) / 128.0 + 1e-3)
            << "token " << t << " head " << h << " dim " << i;
      }
    }
    if (slots[t] < 0) continue;
    for (int h = 0; h < c.kv_heads; ++h) {
      for (int i = 0; i < c.head_dim; ++i) {
        ASSERT_EQ(v_cache[(slots[t] * c.kv_heads + h) * c.head_dim + i],
                  qkv[t * ld_qkv + (c.q_heads + c.kv_heads + h) * c.head_dim + i]);
      }
    }
  }
  // Slot 2 is never written: the skipped token (-1) left the cache alone.
  EXPECT_TRUE(std::isnan(k_cache[2 * c.kv_heads * c.head_dim]));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeKvWriteTest,
                         ::testing::Values(RopeCase{128, 128, 32, 8, false, RopeType::kLlama3},
                                           RopeCase{64, 64, 8, 8, true, RopeType::kDefault},
                                           RopeCase{128, 64, 12, 2, false, RopeType::kYarn},
                                           RopeCase{256, 256, 8, 4, true, RopeType::kLinear},
                                           // 15 heads: the last group of 8 is partial
                                           RopeCase{64, 64, 9, 3, false, RopeType::kDefault}));

}  // namespace
}  // namespace hearth::cuda::testing
