// The tiled (tensor-core) prefill path of paged attention against a float64 reference:
// varlen batches mixing prefill chunks over cached keys with decode rows, shuffled block
// tables, GQA ratios 1/3/4/6/16 (packed and unpacked heads), sliding window, soft-capping,
// head sizes 16-128, padded row strides, and the key-range split with its combine pass
// (a short prompt suffix over a long cached prefix).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_attention_prefill.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

using Bf16 = __nv_bfloat16;

struct PrefillCase {
  int head_dim, q_heads, kv_heads, window;
  float softcap;
  int splits;  // num_splits handed to paged_attention (sizes the workspace); 1: no workspace
  std::vector<std::pair<int, int>> seqs;  // {new query tokens, cached keys before them}
  int ld_pad;                             // extra elements per q / out row
};

// A batch on random paged caches, its float64 reference and the device buffers.
class PrefillBatch {
 public:
  PrefillBatch(const PrefillCase& c, uint32_t seed) : c_(c) {
    const int block_size = 16;
    const int num_seqs = static_cast<int>(c.seqs.size());
    query_start_.assign(num_seqs + 1, 0);
    kv_lens_.resize(num_seqs);
    int max_blocks = 0;
    int total_blocks = 9;  // unused blocks in the pool
    for (int s = 0; s < num_seqs; ++s) {
      query_start_[s + 1] = query_start_[s] + c.seqs[s].first;
      kv_lens_[s] = c.seqs[s].first + c.seqs[s].second;
      int blocks = (kv_lens_[s] + block_size - 1) / block_size;
      max_blocks = std::max(max_blocks, blocks);
      total_blocks += blocks;
    }
    tokens_ = query_start_[num_seqs];
    std::vector<int32_t> pool(total_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(pool.begin(), pool.end(), rng);
    ld_table_ = max_blocks + 1;
    tables_.assign(num_seqs * ld_table_, -1);
    int next = 0;
    for (int s = 0; s < num_seqs; ++s) {
      int blocks = (kv_lens_[s] + block_size - 1) / block_size;
      for (int b = 0; b < blocks; ++b) tables_[s * ld_table_ + b] = pool[next++];
    }
    row_ = static_cast<int64_t>(c.q_heads) * c.head_dim;
    ld_q_ = row_ + c.ld_pad;
    ld_out_ = row_ + c.ld_pad + 4;
    const size_t cache_elems =
        static_cast<size_t>(total_blocks) * block_size * c.kv_heads * c.head_dim;
    q_ = random_bf16_values(tokens_ * ld_q_, seed + 1, 1.5f);
    k_ = random_bf16_values(cache_elems, seed + 2);
    v_ = random_bf16_values(cache_elems, seed + 3);
    compute_reference(block_size);
  }

  // float64 attention of every token; magnitude = Σ p |v| (the scale of rounding errors).
  void compute_reference(int block_size) {
    const PrefillCase& c = c_;
    want_.assign(tokens_ * row_, 0.0);
    magnitude_.assign(tokens_ * row_, 0.0);
    const int group = c.q_heads / c.kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const int32_t* table = &tables_[s * ld_table_];
      auto at = [&](const std::vector<float>& cache, int j, int kv_head) {
        int64_t slot = static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
        return &cache[(slot * c.kv_heads + kv_head) * c.head_dim];
      };
      for (int i = 0; i < c.seqs[s].first; ++i) {
        const int t = query_start_[s] + i;
        const int pos = c.seqs[s].second + i;
        const int first = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
        std::vector<double> p(pos - first + 1);
        for (int h = 0; h < c.q_heads; ++h) {
          const float* q = &q_[t * ld_q_ + h * c.head_dim];
          double m = -INFINITY;
          for (int j = first; j <= pos; ++j) {
            const float* k = at(k_, j, h / group);
            double dot = 0.0;
            for (int d = 0; d < c.head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
            dot *= scale;
            if (c.softcap > 0) dot = c.softcap * std::tanh(dot / c.softcap);
            p[j - first] = dot;
            m = std::max(m, dot);
          }
          double total = 0.0;
          for (double& x : p) total += (x = std::exp(x - m));
          double* out = &want_[t * row_ + h * c.head_dim];
          double* mag = &magnitude_[t * row_ + h * c.head_dim];
          for (int j = first; j <= pos; ++j) {
            const float* v = at(v_, j, h / group);
            const double w = p[j - first] / total;
            for (int d = 0; d < c.head_dim; ++d) {
              out[d] += w * v[d];
              mag[d] += w * std::abs(v[d]);
            }
          }
        }
      }
    }
  }

  const PrefillCase& c_;
  int tokens_ = 0;
  int64_t ld_table_ = 0;
  int64_t row_ = 0;
  int64_t ld_q_ = 0;
  int64_t ld_out_ = 0;
  std::vector<int32_t> query_start_;
  std::vector<int32_t> kv_lens_;
  std::vector<int32_t> tables_;
  std::vector<float> q_;
  std::vector<float> k_;
  std::vector<float> v_;
  std::vector<double> want_;
  std::vector<double> magnitude_;
};

class AttentionPrefillTest : public CudaTest, public ::testing::WithParamInterface<PrefillCase> {
 protected:
  // Runs paged_attention (tiled = false) or only the tiled path on the batch and returns
  // the output rows [tokens, row] (poison where nothing was written).
  std::vector<float> run(const PrefillBatch& b, bool tiled_only) {
    const PrefillCase& c = b.c_;
    dq_ = upload(to_bf16(b.q_));
    dk_ = upload(to_bf16(b.k_));
    dv_ = upload(to_bf16(b.v_));
    dtables_ = upload(b.tables_);
    dstart_ = upload(b.query_start_);
    dlens_ = upload(b.kv_lens_);
    dout_ = poisoned<Bf16>(b.tokens_ * b.ld_out_);
    const size_t ws_bytes =
        paged_attention_workspace_bytes(b.tokens_, c.q_heads, c.head_dim, c.splits);
    dws_ = poisoned<char>(ws_bytes + 16);
    PagedAttentionArgs a;
    a.q = dq_.as<Bf16>();
    a.ld_q = b.ld_q_;
    a.k_cache = dk_.as<Bf16>();
    a.v_cache = dv_.as<Bf16>();
    a.block_tables = dtables_.as<int32_t>();
    a.ld_block_tables = b.ld_table_;
    a.query_start = dstart_.as<int32_t>();
    a.kv_lens = dlens_.as<int32_t>();
    a.out = dout_.as<Bf16>();
    a.ld_out = b.ld_out_;
    a.seqs = static_cast<int>(c.seqs.size());
    a.tokens = b.tokens_;
    a.q_heads = c.q_heads;
    a.kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.block_size = 16;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.softcap = c.softcap;
    a.sliding_window = c.window;
    a.num_splits = c.splits;
    a.workspace = c.splits > 1 ? dws_.as<float>() : nullptr;
    if (tiled_only) {
      EXPECT_EQ(detail::paged_attention_tiled(a, ctx_->stream()), cudaSuccess);
    } else {
      EXPECT_EQ(paged_attention(a, ctx_->stream()), cudaSuccess);
    }
    auto out = from_bf16(download<Bf16>(dout_, b.tokens_ * b.ld_out_));
    std::vector<float> got(b.tokens_ * b.row_);
    for (int t = 0; t < b.tokens_; ++t) {
      std::copy_n(&out[t * b.ld_out_], b.row_, &got[t * b.row_]);
    }
    return got;
  }

  DeviceBuffer dq_, dk_, dv_, dtables_, dstart_, dlens_, dout_, dws_;
};

// Tolerance: inputs are bf16 and shared exactly; scores, exponentials and sums are f32 and
// the probabilities are rounded to bf16 before P·V (as flash attention does), so an output
// element may be off by ~2^-9 of Σ p|v| (far larger than |o| when values cancel), plus the
// final bf16 rounding of o (2^-9 |o|): every element within 2^-7 Σ p|v| + 2^-8 |o|, and the
// relative L2 error under 4e-3.
TEST_P(AttentionPrefillTest, MatchesFloat64Reference) {
  const PrefillCase& c = GetParam();
  PrefillBatch b(c, 101);
  std::vector<float> got = run(b, false);
  EXPECT_LT(relative_error(got, b.want_), 4e-3);
  for (size_t i = 0; i < b.want_.size(); ++i) {
    ASSERT_NEAR(got[i], b.want_[i], b.magnitude_[i] / 128.0 + std::abs(b.want_[i]) / 256.0 + 1e-6)
        << "element " << i << " (token " << i / b.row_ << ")";
  }
}

// The tiled path writes exactly the rows of sequences with >= kTiledMinQueries new tokens.
TEST_P(AttentionPrefillTest, TiledPathWritesOnlyItsRows) {
  const PrefillCase& c = GetParam();
  PrefillBatch b(c, 202);
  std::vector<float> got = run(b, true);
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const bool tiled = c.seqs[s].first >= detail::kTiledMinQueries;
    for (int t = b.query_start_[s]; t < b.query_start_[s + 1]; ++t) {
      for (int64_t e = 0; e < b.row_; ++e) {
        const float x = got[t * b.row_ + e];
        const double w = b.want_[t * b.row_ + e];
        if (tiled) {
          ASSERT_NEAR(x, w, b.magnitude_[t * b.row_ + e] / 128.0 + std::abs(w) / 256.0 + 1e-6)
              << "token " << t << " element " << e;
        } else {
          ASSERT_TRUE(std::isnan(x)) << "decode token " << t << " written by the tiled path";
        }
      }
    }
  }
}

// A serving step: 70 decode rows around prompts, so the tile search crosses several
// 32-sequence chunks (prompts in the first, third and last).
PrefillCase many_sequences() {
  PrefillCase c{128, 8, 2, 0, 0.0f, 4, {{20, 30}}, 0};
  for (int i = 0; i < 70; ++i) {
    c.seqs.push_back({1, 20 + 7 * i});
    if (i == 40) c.seqs.push_back({33, 64});
  }
  c.seqs.push_back({17, 0});
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionPrefillTest,
    ::testing::Values(
        // Llama-3-8B heads: chunks over cached keys, decode rows, a 64-token fresh prompt.
        PrefillCase{128,
                    32,
                    8,
                    0,
                    0.0f,
                    1,
                    {{37, 0}, {17, 100}, {1, 768}, {70, 400}, {3, 29}, {64, 64}},
                    0},
        // The same with workspace: the grid is small, so key ranges split and combine.
        PrefillCase{128,
                    32,
                    8,
                    0,
                    0.0f,
                    24,
                    {{37, 0}, {17, 100}, {1, 768}, {70, 400}, {3, 29}, {64, 64}},
                    0},
        // A 16-token prompt suffix over a long cached prefix (split-KV), padded strides
        // that are not multiples of 8 elements.
        PrefillCase{128, 32, 8, 0, 0.0f, 64, {{16, 3000}}, 2},
        PrefillCase{64, 12, 2, 300, 30.0f, 8, {{100, 0}, {33, 700}, {2, 90}}, 8},
        PrefillCase{32, 8, 2, 40, 20.0f, 1, {{71, 10}, {16, 0}}, 0},
        PrefillCase{16, 4, 2, 0, 0.0f, 4, {{50, 20}, {5, 3}}, 6},
        PrefillCase{128, 8, 8, 0, 0.0f, 1, {{130, 300}, {5, 5}}, 0},
        PrefillCase{64, 16, 1, 100, 0.0f, 16, {{90, 1000}}, 0},
        PrefillCase{128, 6, 2, 0, 0.0f, 1, {{77, 40}}, 0},
        PrefillCase{128, 32, 8, 500, 0.0f, 32, {{20, 3000}, {40, 0}}, 0}, many_sequences()));

TEST(AttentionPrefillWorkspaceTest, OnlySmallGridsGetSplitWorkspace) {
  // A 16-token suffix over a cached prefix: few blocks, so the key range splits.
  EXPECT_GT(detail::paged_attention_tiled_workspace_bytes(16, 32, 128), 0u);
  // A 4096-token prefill fills the device without splitting.
  EXPECT_EQ(detail::paged_attention_tiled_workspace_bytes(4096, 32, 128), 0u);
  // Fewer tokens than one tiled sequence needs, or a head size without the tiled path.
  EXPECT_EQ(detail::paged_attention_tiled_workspace_bytes(15, 32, 128), 0u);
  EXPECT_EQ(detail::paged_attention_tiled_workspace_bytes(64, 32, 96), 0u);
}

}  // namespace
}  // namespace hearth::cuda::testing
