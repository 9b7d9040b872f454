// cpu::paged_attention (flash-style AVX-512 blocks where the build has them) against
// ref::paged_attention: head sizes 64 / 128 / 256 and one the fast path does not take (80),
// GQA groups 1-4, prefill spanning several 16-token query blocks and 16-key blocks, decode
// rows after long cached contexts, sliding windows. Tolerance 2e-5: f32 sums and a polynomial
// exp (~2e-7 relative) against the double reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"

namespace hearth::kernels {
namespace {

std::vector<float> random_vec(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct AttnCase {
  int head_dim, heads, kv_heads, window;
};

class PagedAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PagedAttentionTest, MatchesReference) {
  const auto [hd, heads, kv_heads, window] = GetParam();
  const int block = 16, num_blocks = 24;
  cpu::CpuContext ctx(2);
  // Sequences: 45 new tokens from empty; 7 new after 30 cached; one decode row after 97
  // cached; one decode row after 3 cached. Block tables are shuffled block ids.
  std::vector<int32_t> b0 = {5, 2, 9}, b1 = {0, 11, 7}, b2 = {3, 14, 1, 8, 12, 6, 15}, b3 = {20};
  std::vector<AttentionSequence> seqs = {
      {0, 45, 0, b0.data()}, {45, 7, 30, b1.data()}, {52, 1, 97, b2.data()}, {53, 1, 3, b3.data()}};
  const int tokens = 54;
  const int64_t cache = static_cast<int64_t>(num_blocks) * block * kv_heads * hd;
  auto kc = random_vec(cache, 31, 1.0f);
  auto vc = random_vec(cache, 32, 1.0f);
  auto q = random_vec(static_cast<int64_t>(tokens) * heads * hd, 33, 0.3f);
  std::vector<float> want(q.size()), got(q.size(), NAN);
  PagedAttentionArgs args{q.data(),  want.data(), kc.data(),
                          vc.data(), heads,       kv_heads,
                          hd,        block,       1.0f / std::sqrt(static_cast<float>(hd)),
                          window,    seqs.data(), static_cast<int>(seqs.size())};
  ref::paged_attention(args);
  args.out = got.data();
  cpu::paged_attention(ctx, args);
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1.0 + std::abs(want[i]))) << "index " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(AttnCase{64, 8, 2, 0}, AttnCase{64, 4, 4, 0},
                                           AttnCase{128, 8, 2, 0}, AttnCase{128, 4, 1, 21},
                                           AttnCase{256, 2, 1, 0}, AttnCase{64, 6, 2, 5},
                                           AttnCase{80, 4, 2, 0}));

}  // namespace
}  // namespace hearth::kernels
