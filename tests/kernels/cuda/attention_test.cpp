// Paged attention over mixed batches (a fresh prefill, a chunked prefill on top of cached
// keys, short prefill rows, decode rows with short and long contexts) with shuffled block
// tables, GQA ratios 1..16, every head size, sliding windows, soft-capping and split-K,
// against a float64 reference (checked against kernels/ref::paged_attention where ref has
// the features).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "kernels/cuda/paged_attention.cuh"
#include "kernels/ref/ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

using Bf16 = __nv_bfloat16;

struct AttnCase {
  int head_dim, q_heads, kv_heads, window;
  float softcap;
  int splits;              // 0: paged_attention_num_splits()
  bool invariant = false;  // batch_invariant with paged_attention_invariant_splits (splits unused)
};

// {new query tokens, cached keys before this step} per sequence.
using Batch = std::vector<std::pair<int, int>>;

// CudaTest's helpers are protected; the fixtures hand themselves to check_attention.
class AttentionFixture : public CudaTest {
 public:
  using CudaTest::ctx_;
  using CudaTest::download;
  using CudaTest::poisoned;
  using CudaTest::sm_count;
  using CudaTest::upload;
};

// Tolerance: inputs are bf16 and shared exactly; scores, exponentials and sums are f32.
// Both device paths round the probabilities to bf16 before P·V (as flash attention does),
// so an output element may be off by 2^-9 of Σ p|v| (which is far larger than |o| when
// values cancel), plus the final bf16 rounding of o: relative L2 error under 4e-3, and
// every element within 2^-7 Σ p|v| + 2^-8 |o|.
void check_attention(AttentionFixture& test, const Batch& seqs, const AttnCase& c, uint32_t seed) {
  const int block_size = 16;
  const int num_seqs = static_cast<int>(seqs.size());
  std::vector<int32_t> query_start(num_seqs + 1, 0);
  std::vector<int32_t> kv_lens(num_seqs);
  int max_blocks = 0;
  int max_kv = 0;
  for (int s = 0; s < num_seqs; ++s) {
    query_start[s + 1] = query_start[s] + seqs[s].first;
    kv_lens[s] = seqs[s].first + seqs[s].second;
    max_kv = std::max(max_kv, kv_lens[s]);
    max_blocks = std::max(max_blocks, (kv_lens[s] + block_size - 1) / block_size);
  }
  const int tokens = query_start[num_seqs];
  int total_blocks = 0;
  for (int s = 0; s < num_seqs; ++s) total_blocks += (kv_lens[s] + block_size - 1) / block_size;
  total_blocks += 7;  // unused blocks in the pool
  std::vector<int32_t> pool(total_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  const int64_t ld_table = max_blocks + 2;
  std::vector<int32_t> tables(num_seqs * ld_table, -1);
  std::vector<kernels::AttentionSequence> ref_seqs(num_seqs);
  int next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    int blocks = (kv_lens[s] + block_size - 1) / block_size;
    for (int b = 0; b < blocks; ++b) tables[s * ld_table + b] = pool[next++];
    ref_seqs[s] = {query_start[s], seqs[s].first, seqs[s].second, &tables[s * ld_table]};
  }

  const int64_t row = static_cast<int64_t>(c.q_heads) * c.head_dim;
  const int64_t ld_q = row + 8;
  const size_t cache_elems =
      static_cast<size_t>(total_blocks) * block_size * c.kv_heads * c.head_dim;
  auto q = random_bf16_values(tokens * ld_q, seed + 1);
  auto k_cache = random_bf16_values(cache_elems, seed + 2);
  auto v_cache = random_bf16_values(cache_elems, seed + 3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // float64 reference with soft-capping.
  std::vector<double> want(tokens * row);
  std::vector<double> magnitude(tokens * row);  // Σ p |v|
  const int group = c.q_heads / c.kv_heads;
  for (int s = 0; s < num_seqs; ++s) {
    for (int i = 0; i < seqs[s].first; ++i) {
      int t = query_start[s] + i;
      int pos = seqs[s].second + i;
      int first = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      for (int h = 0; h < c.q_heads; ++h) {
        std::vector<double> p(pos - first + 1);
        double m = -INFINITY;
        auto kv_at = [&](const std::vector<float>& cache, int j) {
          int64_t slot = static_cast<int64_t>(tables[s * ld_table + j / block_size]) * block_size +
                         j % block_size;
          return &cache[(slot * c.kv_heads + h / group) * c.head_dim];
        };
        for (int j = first; j <= pos; ++j) {
          const float* k = kv_at(k_cache, j);
          double dot = 0.0;
          for (int d = 0; d < c.head_dim; ++d) dot += q[t * ld_q + h * c.head_dim + d] * k[d];
          dot *= scale;
          if (c.softcap > 0) dot = c.softcap * std::tanh(dot / c.softcap);
          p[j - first] = dot;
          m = std::max(m, dot);
        }
        double total = 0.0;
        for (double& x : p) total += (x = std::exp(x - m));
        for (int d = 0; d < c.head_dim; ++d) {
          double acc = 0.0;
          double mag = 0.0;
          for (int j = first; j <= pos; ++j) {
            acc += p[j - first] * kv_at(v_cache, j)[d];
            mag += p[j - first] * std::abs(kv_at(v_cache, j)[d]);
          }
          want[t * row + h * c.head_dim + d] = acc / total;
          magnitude[t * row + h * c.head_dim + d] = mag / total;
        }
      }
    }
  }
  if (c.softcap == 0.0f && tokens <= 64) {  // the float64 reference agrees with kernels/ref
    std::vector<float> q_dense(tokens * row);
    for (int t = 0; t < tokens; ++t) {
      std::copy_n(&q[t * ld_q], row, &q_dense[t * row]);
    }
    std::vector<float> ref_out(tokens * row);
    kernels::PagedAttentionArgs ra;
    ra.q = q_dense.data();
    ra.out = ref_out.data();
    ra.k_cache = k_cache.data();
    ra.v_cache = v_cache.data();
    ra.num_heads = c.q_heads;
    ra.num_kv_heads = c.kv_heads;
    ra.head_dim = c.head_dim;
    ra.block_size = block_size;
    ra.scale = scale;
    ra.window = c.window;
    ra.sequences = ref_seqs.data();
    ra.num_sequences = num_seqs;
    kernels::ref::paged_attention(ra);
    EXPECT_LT(relative_error(ref_out, want), 1e-5);
  }

  DeviceBuffer dq = test.upload(to_bf16(q));
  DeviceBuffer dk = test.upload(to_bf16(k_cache));
  DeviceBuffer dv = test.upload(to_bf16(v_cache));
  DeviceBuffer dtables = test.upload(tables);
  DeviceBuffer dstart = test.upload(query_start);
  DeviceBuffer dlens = test.upload(kv_lens);
  const int64_t ld_out = row + 24;
  DeviceBuffer dout = test.poisoned<Bf16>(tokens * ld_out);
  int split_keys = 0;
  const int splits = c.invariant    ? paged_attention_invariant_splits(max_kv, &split_keys)
                     : c.splits > 0 ? c.splits
                                    : paged_attention_num_splits(tokens, c.q_heads, c.kv_heads,
                                                                 max_kv, test.sm_count());
  size_t ws_bytes = paged_attention_workspace_bytes(tokens, c.q_heads, c.head_dim, splits);
  DeviceBuffer dws = test.poisoned<char>(ws_bytes + 16);

  PagedAttentionArgs a;
  a.q = dq.as<Bf16>();
  a.ld_q = ld_q;
  a.k_cache = dk.as<Bf16>();
  a.v_cache = dv.as<Bf16>();
  a.block_tables = dtables.as<int32_t>();
  a.ld_block_tables = ld_table;
  a.query_start = dstart.as<int32_t>();
  a.kv_lens = dlens.as<int32_t>();
  a.out = dout.as<Bf16>();
  a.ld_out = ld_out;
  a.seqs = num_seqs;
  a.tokens = tokens;
  a.q_heads = c.q_heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.block_size = block_size;
  a.scale = scale;
  a.softcap = c.softcap;
  a.sliding_window = c.window;
  a.num_splits = splits;
  a.split_keys = split_keys;
  a.batch_invariant = c.invariant;
  a.workspace = ws_bytes > 0 ? dws.as<float>() : nullptr;  // as the model passes it
  ASSERT_EQ(paged_attention(a, test.ctx_->stream()), cudaSuccess);
  auto out = from_bf16(test.download<Bf16>(dout, tokens * ld_out));
  std::vector<float> got(tokens * row);
  for (int t = 0; t < tokens; ++t) std::copy_n(&out[t * ld_out], row, &got[t * row]);
  EXPECT_LT(relative_error(got, want), 4e-3) << "splits " << splits;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], magnitude[i] / 128.0 + std::abs(want[i]) / 256.0 + 1e-6)
        << "element " << i << " (token " << i / row << ", head " << (i % row) / c.head_dim
        << ", dim " << i % c.head_dim << "), splits " << splits;
  }
  if (!c.invariant) return;
  const auto first = test.download<Bf16>(dout, tokens * ld_out);
  // Batch-invariant: each sequence alone (its own split count) gives its rows the same bits
  // as inside the batch.
  for (int s = 0; s < num_seqs; ++s) {
    DeviceBuffer qs1 = test.upload(std::vector<int32_t>{0, seqs[s].first});
    DeviceBuffer kv1 = test.upload(std::vector<int32_t>{kv_lens[s]});
    DeviceBuffer table1 = test.upload(
        std::vector<int32_t>(tables.begin() + s * ld_table, tables.begin() + (s + 1) * ld_table));
    PagedAttentionArgs b = a;
    b.q = dq.as<Bf16>() + static_cast<int64_t>(query_start[s]) * ld_q;
    b.block_tables = table1.as<int32_t>();
    b.query_start = qs1.as<int32_t>();
    b.kv_lens = kv1.as<int32_t>();
    b.seqs = 1;
    b.tokens = seqs[s].first;
    b.num_splits = paged_attention_invariant_splits(kv_lens[s], &b.split_keys);
    DeviceBuffer ws1 = test.poisoned<char>(
        paged_attention_workspace_bytes(b.tokens, c.q_heads, c.head_dim, b.num_splits) + 16);
    b.workspace = ws1.as<float>();
    DeviceBuffer out1 = test.poisoned<Bf16>(b.tokens * ld_out);
    b.out = out1.as<Bf16>();
    ASSERT_EQ(paged_attention(b, test.ctx_->stream()), cudaSuccess);
    const auto alone = test.download<Bf16>(out1, b.tokens * ld_out);
    for (int i = 0; i < b.tokens; ++i) {
      ASSERT_EQ(std::memcmp(&alone[i * ld_out], &first[(query_start[s] + i) * ld_out],
                            row * sizeof(Bf16)),
                0)
          << "sequence " << s << " token " << i << ": alone (" << b.num_splits << " splits) vs "
          << splits << " in the batch";
    }
    // ... and so does each of a prompt's first, middle and last tokens run as a decode row
    // over the keys before it (a prompt chunked down to one token).
    if (seqs[s].first < 2) continue;
    for (const int i : {0, seqs[s].first / 2, seqs[s].first - 1}) {
      PagedAttentionArgs d = b;
      DeviceBuffer one = test.upload(std::vector<int32_t>{0, 1});
      DeviceBuffer kv = test.upload(std::vector<int32_t>{kv_lens[s] - (seqs[s].first - 1 - i)});
      d.q = b.q + static_cast<int64_t>(i) * ld_q;
      d.query_start = one.as<int32_t>();
      d.kv_lens = kv.as<int32_t>();
      d.tokens = 1;
      d.num_splits = paged_attention_invariant_splits(kv_lens[s], &d.split_keys);
      DeviceBuffer ws = test.poisoned<char>(
          paged_attention_workspace_bytes(1, c.q_heads, c.head_dim, d.num_splits) + 16);
      d.workspace = ws.as<float>();
      DeviceBuffer out_row = test.poisoned<Bf16>(ld_out);
      d.out = out_row.as<Bf16>();
      ASSERT_EQ(paged_attention(d, test.ctx_->stream()), cudaSuccess);
      const auto row_bits = test.download<Bf16>(out_row, ld_out);
      ASSERT_EQ(
          std::memcmp(row_bits.data(), &first[(query_start[s] + i) * ld_out], row * sizeof(Bf16)),
          0)
          << "sequence " << s << " token " << i << " as a decode row vs in its prompt";
    }
  }
}

class PagedAttentionTest : public AttentionFixture,
                           public ::testing::WithParamInterface<AttnCase> {};

// A prefill on an empty cache and a chunked prefill (both >= 16 tokens: the tiled path
// where the head size has it), decode rows with long contexts, a short prefill row.
TEST_P(PagedAttentionTest, MixedBatchMatchesReference) {
  check_attention(*this, {{37, 0}, {17, 100}, {1, 768}, {1, 5124}, {3, 29}}, GetParam(), 61);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Values(AttnCase{128, 32, 8, 0, 0.0f, 1}, AttnCase{128, 8, 8, 0, 0.0f, 5},
                      AttnCase{64, 12, 2, 0, 50.0f, 1}, AttnCase{256, 8, 4, 64, 30.0f, 3},
                      AttnCase{96, 6, 1, 300, 0.0f, 8}, AttnCase{128, 4, 2, 0, 0.0f, 64},
                      AttnCase{16, 4, 2, 0, 0.0f, 1}, AttnCase{32, 8, 2, 40, 20.0f, 4},
                      AttnCase{128, 32, 8, 0, 0.0f, 0},
                      // batch-invariant: fixed 512-key splits, every row on the tiled path
                      AttnCase{128, 32, 8, 0, 0.0f, 0, true}));

class PagedDecodeTest : public AttentionFixture, public ::testing::WithParamInterface<AttnCase> {};

// The decode kernel's own territory: many decode rows with odd context lengths (1 key, a
// partial block, exact blocks, thousands of keys), short prefill rows (2..15 tokens, each
// with its own causal position) and one row long enough to be split many ways. Invariant
// cases (the tiled kernel for head sizes it has, else this one): rows of one 512-key split
// are written directly, longer ones merged.
TEST_P(PagedDecodeTest, DecodeRowsMatchReference) {
  check_attention(*this,
                  {{1, 0},
                   {1, 15},
                   {1, 16},
                   {2, 31},
                   {1, 200},
                   {15, 57},
                   {1, 511},
                   {7, 0},
                   {1, 1000},
                   {6, 509},  // its rows see 510-515 keys: across the invariant 512-key split
                   {1, 2999},
                   {3, 130}},
                  GetParam(), 97);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedDecodeTest,
    ::testing::Values(
        // Llama-3 8B: GQA 4, heuristic splits, one split, many splits.
        AttnCase{128, 32, 8, 0, 0.0f, 0}, AttnCase{128, 32, 8, 0, 0.0f, 1},
        AttnCase{128, 32, 8, 0, 0.0f, 13},
        // Every head size, GQA ratios 1..16 (3, 5, 6, 12: partial 8-head groups).
        AttnCase{16, 8, 8, 0, 0.0f, 2}, AttnCase{32, 6, 2, 0, 0.0f, 0},
        AttnCase{64, 10, 2, 0, 0.0f, 3}, AttnCase{96, 12, 2, 0, 0.0f, 0},
        AttnCase{160, 6, 1, 0, 0.0f, 4}, AttnCase{192, 16, 2, 0, 0.0f, 1},
        AttnCase{256, 16, 8, 0, 0.0f, 0}, AttnCase{128, 24, 2, 0, 0.0f, 2},
        AttnCase{128, 32, 2, 0, 0.0f, 0}, AttnCase{64, 8, 1, 0, 0.0f, 1},
        // Sliding windows (shorter than a block, odd, longer than most rows), soft-capping.
        AttnCase{128, 32, 8, 7, 0.0f, 0}, AttnCase{128, 32, 8, 333, 0.0f, 5},
        AttnCase{256, 8, 4, 4096, 30.0f, 0}, AttnCase{64, 8, 2, 100, 50.0f, 2},
        AttnCase{32, 4, 4, 0, 20.0f, 0},
        // Batch-invariant splits: the 8B's heads, a window with soft-capping, head_dim 256.
        AttnCase{128, 32, 8, 0, 0.0f, 0, true}, AttnCase{64, 8, 2, 100, 50.0f, 0, true},
        AttnCase{256, 16, 8, 0, 0.0f, 0, true}));

class PagedInvariantTest : public AttentionFixture,
                           public ::testing::WithParamInterface<AttnCase> {};

// Batch-invariant splits on the tiled kernel: prompts whose tiles cross the 512-key splits
// (rows of one split beside rows of two in one tile), a chunk far into its context, decode
// rows of one and of several splits; each sequence alone and each checked prompt token as a
// decode row must give the batch's bits.
TEST_P(PagedInvariantTest, RowsMatchAloneAndAsDecodeRows) {
  check_attention(*this, {{100, 470}, {1, 1100}, {70, 1000}, {1, 40}, {33, 0}, {1, 511}},
                  GetParam(), 131);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedInvariantTest,
                         ::testing::Values(AttnCase{128, 32, 8, 0, 0.0f, 0, true},
                                           AttnCase{64, 8, 2, 100, 50.0f, 0, true},
                                           AttnCase{32, 8, 2, 600, 20.0f, 0, true},
                                           AttnCase{16, 4, 4, 0, 0.0f, 0, true},
                                           AttnCase{128, 24, 2, 0, 0.0f, 0, true},
                                           AttnCase{96, 12, 2, 0, 0.0f, 0, true}));

TEST_F(CudaTest, PagedAttentionRejectsBadArguments) {
  PagedAttentionArgs a;
  a.seqs = 1;
  a.tokens = 1;
  a.q_heads = 6;
  a.kv_heads = 4;  // does not divide q_heads
  a.head_dim = 128;
  a.block_size = 16;
  a.ld_q = a.ld_out = 6 * 128;
  EXPECT_EQ(paged_attention(a, ctx_->stream()), cudaErrorInvalidValue);
  a.kv_heads = 2;
  a.head_dim = 80;  // no kernel for this head size
  a.ld_q = a.ld_out = 6 * 80;
  EXPECT_EQ(paged_attention(a, ctx_->stream()), cudaErrorInvalidValue);
  a.head_dim = 128;
  a.ld_q = a.ld_out = 6 * 128;
  a.num_splits = 4;  // splits without a workspace
  EXPECT_EQ(paged_attention(a, ctx_->stream()), cudaErrorInvalidValue);
  float dummy = 0.0f;
  a.workspace = &dummy;  // rejected before any launch
  a.num_splits = 257;    // more than the merge kernel takes
  EXPECT_EQ(paged_attention(a, ctx_->stream()), cudaErrorInvalidValue);
}

TEST(PagedAttentionSplitsTest, SplitsOnlyWhenTheGridIsSmall) {
  // A big decode batch already fills 132 SMs with (token, KV head) blocks.
  EXPECT_EQ(paged_attention_num_splits(4096, 32, 8, 4096, 132), 1);
  EXPECT_EQ(paged_attention_num_splits(256, 32, 8, 256, 132), 1);
  // One long sequence: split until the grid covers the device, never below 128 keys a split.
  const int one = paged_attention_num_splits(1, 32, 8, 32768, 132);
  EXPECT_GE(8 * one, 132);
  EXPECT_LE(one, 128);
  EXPECT_GT(paged_attention_num_splits(1, 32, 8, 8192, 132), 1);
  EXPECT_LE(paged_attention_num_splits(1, 32, 8, 640, 132), 5);
  EXPECT_EQ(paged_attention_num_splits(1, 32, 8, 100, 132), 1);
  // Powers of two only (few distinct captured graphs as a context grows).
  for (int kv : {64, 100, 1000, 4096, 5000, 32768}) {
    int n = paged_attention_num_splits(1, 32, 8, kv, 132);
    EXPECT_EQ(n & (n - 1), 0) << kv;
  }
  // Without the KV head count: as if every q head had its own KV head.
  EXPECT_EQ(paged_attention_num_splits(2, 32, 9000, 132),
            paged_attention_num_splits(2, 32, 32, 9000, 132));
  // A pure function of the shapes (CUDA-graph capture keys on it).
  EXPECT_EQ(paged_attention_num_splits(3, 32, 8, 5000, 132),
            paged_attention_num_splits(3, 32, 8, 5000, 132));
}

}  // namespace
}  // namespace hearth::cuda::testing
