// The decode step's fused forms against the kernels they replace, on the same inputs: the qkv
// GEMV with RoPE + KV write in its epilogue (GemvEpilogue::kRopeKvWrite) against gemv_bf16's
// plain store followed by rope_kv_write, and paged attention under programmatic dependent
// launch (metadata before the wait, early trigger) against the plain launch. The math is the
// same, so the bits must be; graph replay must give the eager bits.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/rope_frequencies.h"
#include "kernels/cuda/rope_kv_write.cuh"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace hearth::cuda::testing {
namespace {

using Bf16 = __nv_bfloat16;

struct RopeGemvCase {
  int m, q_heads, kv_heads, head_dim, k;
  int split;  // 0: the kernel's choice (compared within tolerance)
  bool norm, bias, pdl;
};

class GemvRopeTest : public CudaTest, public ::testing::WithParamInterface<RopeGemvCase> {};

std::vector<uint16_t> raw_bits(const std::vector<Bf16>& v) {
  std::vector<uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 2);
  return out;
}

TEST_P(GemvRopeTest, MatchesGemvThenRopeKvWrite) {
  const RopeGemvCase c = GetParam();
  const int n = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
  const int64_t ldx = c.k + 8;
  const int64_t ld_q = static_cast<int64_t>(c.q_heads) * c.head_dim + 16;
  const int num_slots = 48;
  const size_t cache_elems = static_cast<size_t>(num_slots) * c.kv_heads * c.head_dim;
  // 131000 rad takes sincosf's slow path; slot -1 writes no K/V.
  const std::vector<int32_t> positions = {129, 131000, 7, 4095};
  const std::vector<int64_t> slots = {5, c.m > 2 ? 40 : -1, 47, 0};
  auto table = rope_frequencies(500000.0, c.head_dim, {});
  ASSERT_TRUE(table.ok());

  auto x = random_bf16_values(c.m * ldx, 61, c.norm ? 3.0f : 1.0f);
  auto w = random_bf16_values(size_t(n) * c.k, 62, 0.05f);
  auto bias = random_bf16_values(n, 63);
  auto norm_w = random_bf16_values(c.k, 64, 0.5f);
  DeviceBuffer dx = upload(to_bf16(x));
  DeviceBuffer dw = upload(to_bf16(w));
  DeviceBuffer dbias = upload(to_bf16(bias));
  DeviceBuffer dnorm = upload(to_bf16(norm_w));
  DeviceBuffer dpos = upload(std::vector<int32_t>(positions.begin(), positions.begin() + c.m));
  DeviceBuffer dslots = upload(std::vector<int64_t>(slots.begin(), slots.begin() + c.m));
  DeviceBuffer dfreq = upload(table->inv_freq);
  cudaStream_t st = ctx_->stream();

  GemvArgs g;
  g.x = dx.as<Bf16>();
  g.ldx = ldx;
  g.w = dw.as<Bf16>();
  g.ldw = c.k;
  g.bias = c.bias ? dbias.as<Bf16>() : nullptr;
  g.norm_weight = c.norm ? dnorm.as<Bf16>() : nullptr;
  g.norm_offset = 0.25f;
  g.norm_eps = 1e-5f;
  g.m = c.m;
  g.n = n;
  g.k = c.k;
  g.sm_count = sm_count();
  g.split = c.split;
  g.pdl = c.pdl && ctx_->properties().major >= 9;

  RopeKvWriteArgs r;
  r.ld_qkv = n;
  r.positions = dpos.as<int32_t>();
  r.slots = dslots.as<int64_t>();
  r.inv_freq = dfreq.as<float>();
  r.attention_scaling = 1.125f;
  r.ld_q_out = ld_q;
  r.tokens = c.m;
  r.q_heads = c.q_heads;
  r.kv_heads = c.kv_heads;
  r.head_dim = c.head_dim;
  r.rotary_dim = c.head_dim;

  // Unfused: the GEMV's plain store (split 0 there: the plain path's own choice), then
  // rope_kv_write over its output.
  DeviceBuffer qkv = poisoned<Bf16>(size_t(c.m) * n);
  DeviceBuffer want_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer want_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer want_v = poisoned<Bf16>(cache_elems);
  GemvArgs plain = g;
  plain.y = qkv.data();
  plain.ldy = n;
  plain.epilogue = GemvEpilogue::kStore;
  ASSERT_TRUE(gemv_bf16_supported(plain));
  ASSERT_EQ(gemv_bf16(plain, st), cudaSuccess);
  RopeKvWriteArgs ur = r;
  ur.qkv = qkv.as<Bf16>();
  ur.q_out = want_q.as<Bf16>();
  ur.k_cache = want_k.as<Bf16>();
  ur.v_cache = want_v.as<Bf16>();
  ASSERT_EQ(rope_kv_write(ur, st), cudaSuccess);

  // Fused, eager and graph-replayed into separate outputs.
  auto run_fused = [&](bool graph, DeviceBuffer& q, DeviceBuffer& kc, DeviceBuffer& vc) {
    GemvArgs f = g;
    f.epilogue = GemvEpilogue::kRopeKvWrite;
    f.rope = r;
    f.rope.q_out = q.as<Bf16>();
    f.rope.k_cache = kc.as<Bf16>();
    f.rope.v_cache = vc.as<Bf16>();
    ASSERT_TRUE(gemv_bf16_supported(f));
    if (!graph) {
      ASSERT_EQ(gemv_bf16(f, st), cudaSuccess);
      return;
    }
    cudaGraph_t gr = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(gemv_bf16(f, st), cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(st, &gr), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, gr, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_TRUE(ctx_->synchronize().ok());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(gr);
  };
  DeviceBuffer got_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer got_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer got_v = poisoned<Bf16>(cache_elems);
  run_fused(false, got_q, got_k, got_v);
  DeviceBuffer rep_q = poisoned<Bf16>(c.m * ld_q);
  DeviceBuffer rep_k = poisoned<Bf16>(cache_elems);
  DeviceBuffer rep_v = poisoned<Bf16>(cache_elems);
  run_fused(true, rep_q, rep_k, rep_v);

  struct Out {
    const char* what;
    DeviceBuffer *want, *got, *replay;
    size_t elems;
  };
  Out outs[] = {{"q", &want_q, &got_q, &rep_q, size_t(c.m) * ld_q},
                {"k cache", &want_k, &got_k, &rep_k, cache_elems},
                {"v cache", &want_v, &got_v, &rep_v, cache_elems}};
  for (const Out& o : outs) {
    auto want = download<Bf16>(*o.want, o.elems);
    auto got = download<Bf16>(*o.got, o.elems);
    auto replay = download<Bf16>(*o.replay, o.elems);
    EXPECT_EQ(raw_bits(got), raw_bits(replay)) << o.what << ": graph replay differs from eager";
    if (c.split != 0) {
      EXPECT_EQ(raw_bits(got), raw_bits(want)) << o.what << ": not bit-identical";
      continue;
    }
    // Another split reorders the f32 sums: values within a bf16 ulp or so; the untouched
    // elements (poison) must match exactly.
    std::vector<float> g32;
    std::vector<double> w64;
    auto gb = raw_bits(got);
    auto wb = raw_bits(want);
    for (size_t i = 0; i < o.elems; ++i) {
      if (wb[i] == 0xffff || gb[i] == 0xffff) {
        ASSERT_EQ(gb[i], wb[i]) << o.what << " element " << i;
        continue;
      }
      g32.push_back(__bfloat162float(got[i]));
      w64.push_back(__bfloat162float(want[i]));
    }
    EXPECT_LT(relative_error(g32, w64), 4e-3) << o.what;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GemvRopeTest,
                         ::testing::Values(
                             // The 8B's qkv: 32 q + 8 KV heads of 128, k = 4096.
                             RopeGemvCase{1, 32, 8, 128, 4096, 4, true, false, true},
                             RopeGemvCase{1, 32, 8, 128, 4096, 1, true, false, false},
                             RopeGemvCase{2, 32, 8, 128, 4096, 2, true, true, true},
                             RopeGemvCase{1, 32, 8, 128, 4096, 0, true, false, true},
                             // Qwen2-like bias, GQA 7, head_dim 64; odd k tail.
                             RopeGemvCase{2, 14, 2, 64, 904, 1, false, true, false},
                             RopeGemvCase{3, 4, 4, 32, 520, 4, true, false, true},
                             RopeGemvCase{4, 8, 1, 256, 1032, 2, false, false, true}));

TEST_F(CudaTest, GemvRopeRejectsUnsupported) {
  DeviceBuffer buf = poisoned<Bf16>(64 * 1024);
  GemvArgs a;
  a.x = buf.as<Bf16>();
  a.ldx = 128;
  a.w = buf.as<Bf16>();
  a.ldw = 128;
  a.epilogue = GemvEpilogue::kRopeKvWrite;
  a.m = 1;
  a.n = (4 + 2 * 2) * 32;
  a.k = 128;
  a.sm_count = sm_count();
  a.rope.positions = reinterpret_cast<const int32_t*>(buf.data());
  a.rope.slots = reinterpret_cast<const int64_t*>(buf.data());
  a.rope.inv_freq = reinterpret_cast<const float*>(buf.data());
  a.rope.q_out = a.rope.k_cache = a.rope.v_cache = buf.as<Bf16>();
  a.rope.ld_q_out = 128;
  a.rope.q_heads = 4;
  a.rope.kv_heads = 2;
  a.rope.head_dim = 32;
  a.rope.rotary_dim = 32;
  EXPECT_TRUE(gemv_bf16_supported(a));
  a.rope.rotary_dim = 16;  // partial rotary: rope_kv_write's path
  EXPECT_FALSE(gemv_bf16_supported(a));
  a.rope.rotary_dim = 32;
  a.rope.q_norm = buf.as<Bf16>();  // per-head q/k norm needs the whole head
  EXPECT_FALSE(gemv_bf16_supported(a));
  a.rope.q_norm = nullptr;
  a.n += 32;  // rows must be the heads'
  EXPECT_FALSE(gemv_bf16_supported(a));
  EXPECT_EQ(gemv_bf16(a, ctx_->stream()), cudaErrorInvalidValue);
}

// Gate and up rows in blocks (b gate rows, then their b up rows; b = 1 alternates them) give
// the bits of the stacked layout at the same split, with and without bias, SiLU and GELU.
TEST_F(CudaTest, GemvGatedInterleavedMatchesStacked) {
  const int m = 2, n = 1000, k = 1032;
  auto x = random_bf16_values(size_t(m) * k, 81);
  auto w = random_bf16_values(size_t(2) * n * k, 82, 0.05f);
  auto bias = random_bf16_values(2 * n, 83);
  DeviceBuffer dx = upload(to_bf16(x));
  DeviceBuffer dw = upload(to_bf16(w));
  DeviceBuffer dbias = upload(to_bf16(bias));
  for (int block : {1, 8}) {
    std::vector<float> wi(w.size());
    for (int j = 0; j < n; ++j) {
      for (int p = 0; p < 2; ++p) {
        const size_t row = size_t(j / block) * 2 * block + j % block + size_t(p) * block;
        std::copy_n(w.begin() + (size_t(p) * n + j) * k, k, wi.begin() + row * k);
      }
    }
    DeviceBuffer dwi = upload(to_bf16(wi));
    for (GemvEpilogue epi : {GemvEpilogue::kGatedSilu, GemvEpilogue::kGatedGeluTanh}) {
      for (int split : {1, 2, 0}) {
        for (bool with_bias : {false, true}) {
          std::vector<uint16_t> outs[2];
          for (int inter = 0; inter < 2; ++inter) {
            DeviceBuffer y = poisoned<Bf16>(size_t(m) * n);
            GemvArgs a;
            a.x = dx.as<Bf16>();
            a.ldx = k;
            a.w = inter ? dwi.as<Bf16>() : dw.as<Bf16>();
            a.ldw = k;
            a.bias = with_bias ? dbias.as<Bf16>() : nullptr;
            a.y = y.data();
            a.ldy = n;
            a.epilogue = epi;
            a.m = m;
            a.n = n;
            a.k = k;
            a.sm_count = sm_count();
            a.split = split;
            a.pdl = ctx_->properties().major >= 9;
            a.gate_up_block = inter == 1 ? block : 0;
            ASSERT_TRUE(gemv_bf16_supported(a));
            ASSERT_EQ(gemv_bf16(a, ctx_->stream()), cudaSuccess);
            outs[inter] = raw_bits(download<Bf16>(y, size_t(m) * n));
          }
          EXPECT_EQ(outs[0], outs[1])
              << "block " << block << " split " << split << " bias " << with_bias;
          EXPECT_EQ(std::count(outs[0].begin(), outs[0].end(), uint16_t{0xffff}), 0);
        }
      }
    }
  }
}

// Paged attention under PDL after the kernel that writes its q and K/V (rope_kv_write), in
// decode batches (1 and 64 sequences, 1 and several splits, 4 and 8 warps a block) and a
// mixed batch (the tiled prefill path runs first): the bits of the plain launch, eager and
// graph-replayed; 8 warps a block within f32-reordering distance of 4.
struct PdlCase {
  int seqs;
  int prompt;  // > 0: sequence 0 brings this many new tokens (a prefill row); others 1
  int splits;
  int warps;  // PagedAttentionArgs::block_warps
};

class PagedAttentionPdlTest : public CudaTest, public ::testing::WithParamInterface<PdlCase> {};

TEST_P(PagedAttentionPdlTest, MatchesPlainLaunch) {
  const PdlCase c = GetParam();
  const int q_heads = 32, kv_heads = 8, hd = 128, block_size = 16;
  std::mt19937 rng(71);
  std::vector<int32_t> query_start(c.seqs + 1, 0), kv_lens(c.seqs), positions;
  for (int s = 0; s < c.seqs; ++s) {
    const int new_tokens = s == 0 && c.prompt > 0 ? c.prompt : 1;
    query_start[s + 1] = query_start[s] + new_tokens;
    kv_lens[s] = 100 + static_cast<int>(rng() % 300) + new_tokens;
    for (int i = 0; i < new_tokens; ++i) positions.push_back(kv_lens[s] - new_tokens + i);
  }
  const int tokens = query_start[c.seqs];
  const int max_blocks = (400 + c.prompt + block_size) / block_size + 1;
  const int pool = c.seqs * max_blocks + 3;
  std::vector<int32_t> perm(pool);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(c.seqs) * max_blocks);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = perm[i];
  std::vector<int64_t> slots;
  for (int s = 0; s < c.seqs; ++s) {
    for (int t = query_start[s]; t < query_start[s + 1]; ++t) {
      const int p = positions[t];
      slots.push_back(int64_t{tables[size_t(s) * max_blocks + p / block_size]} * block_size +
                      p % block_size);
    }
  }
  const int qkv_dim = (q_heads + 2 * kv_heads) * hd;
  const size_t cache_elems = size_t(pool) * block_size * kv_heads * hd;
  auto qkv = random_bf16_values(size_t(tokens) * qkv_dim, 72);
  auto kc = random_bf16_values(cache_elems, 73);
  auto vc = random_bf16_values(cache_elems, 74);
  auto table = rope_frequencies(500000.0, hd, {});
  ASSERT_TRUE(table.ok());
  DeviceBuffer dqkv = upload(to_bf16(qkv));
  DeviceBuffer dk = upload(to_bf16(kc));
  DeviceBuffer dv = upload(to_bf16(vc));
  DeviceBuffer dq = poisoned<Bf16>(size_t(tokens) * q_heads * hd);
  DeviceBuffer dpos = upload(positions);
  DeviceBuffer dslots = upload(slots);
  DeviceBuffer dfreq = upload(table->inv_freq);
  DeviceBuffer dtables = upload(tables);
  DeviceBuffer dqs = upload(query_start);
  DeviceBuffer dkl = upload(kv_lens);
  const size_t ws_bytes = paged_attention_workspace_bytes(tokens, q_heads, hd, c.splits);
  DeviceBuffer ws = poisoned<float>(ws_bytes / 4 + 1);
  cudaStream_t st = ctx_->stream();

  RopeKvWriteArgs r;
  r.qkv = dqkv.as<Bf16>();
  r.ld_qkv = qkv_dim;
  r.positions = dpos.as<int32_t>();
  r.slots = dslots.as<int64_t>();
  r.inv_freq = dfreq.as<float>();
  r.q_out = dq.as<Bf16>();
  r.ld_q_out = q_heads * hd;
  r.k_cache = dk.as<Bf16>();
  r.v_cache = dv.as<Bf16>();
  r.tokens = tokens;
  r.q_heads = q_heads;
  r.kv_heads = kv_heads;
  r.head_dim = hd;
  r.rotary_dim = hd;
  PagedAttentionArgs a;
  a.q = dq.as<Bf16>();
  a.ld_q = q_heads * hd;
  a.k_cache = dk.as<Bf16>();
  a.v_cache = dv.as<Bf16>();
  a.block_tables = dtables.as<int32_t>();
  a.ld_block_tables = max_blocks;
  a.query_start = dqs.as<int32_t>();
  a.kv_lens = dkl.as<int32_t>();
  a.ld_out = q_heads * hd;
  a.seqs = c.seqs;
  a.tokens = tokens;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.block_size = block_size;
  a.scale = 0.0883883f;
  a.num_splits = c.splits;
  a.block_warps = c.warps;
  a.workspace = c.splits > 1 || ws_bytes > 0 ? ws.as<float>() : nullptr;
  const bool pdl_ok = ctx_->properties().major >= 9;

  // rope_kv_write rewrites the same q and K/V rows each time, so every run sees the same
  // inputs.
  auto run = [&](bool pdl, bool graph, DeviceBuffer& out, int warps) {
    PagedAttentionArgs b = a;
    b.block_warps = warps;
    b.out = out.as<Bf16>();
    b.pdl = pdl && pdl_ok;
    cudaGraph_t gr = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (graph) {
      ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    }
    ASSERT_EQ(rope_kv_write(r, st), cudaSuccess);
    ASSERT_EQ(paged_attention(b, st), cudaSuccess);
    if (graph) {
      ASSERT_EQ(cudaStreamEndCapture(st, &gr), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, gr, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    }
    ASSERT_TRUE(ctx_->synchronize().ok());
    if (graph) {
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(gr);
    }
  };
  const size_t out_elems = size_t(tokens) * q_heads * hd;
  DeviceBuffer plain = poisoned<Bf16>(out_elems);
  DeviceBuffer eager = poisoned<Bf16>(out_elems);
  DeviceBuffer replay = poisoned<Bf16>(out_elems);
  run(false, false, plain, c.warps);
  run(true, false, eager, c.warps);
  run(true, true, replay, c.warps);
  auto want = raw_bits(download<Bf16>(plain, out_elems));
  EXPECT_EQ(std::count(want.begin(), want.end(), uint16_t{0xffff}), 0) << "unwritten outputs";
  EXPECT_EQ(raw_bits(download<Bf16>(eager, out_elems)), want);
  EXPECT_EQ(raw_bits(download<Bf16>(replay, out_elems)), want);
  // 8 warps a block against 4: the same keys, warps merged in another order (f32 sums).
  DeviceBuffer four = poisoned<Bf16>(out_elems);
  DeviceBuffer eight = poisoned<Bf16>(out_elems);
  run(false, false, four, 4);
  run(false, false, eight, 8);
  auto f4 = from_bf16(download<Bf16>(four, out_elems));
  auto f8 = from_bf16(download<Bf16>(eight, out_elems));
  EXPECT_LT(relative_error(f8, std::vector<double>(f4.begin(), f4.end())), 4e-3);
}

INSTANTIATE_TEST_SUITE_P(Batches, PagedAttentionPdlTest,
                         ::testing::Values(PdlCase{1, 0, 1, 0}, PdlCase{1, 0, 2, 8},
                                           PdlCase{1, 0, 1, 4}, PdlCase{64, 0, 1, 0},
                                           PdlCase{8, 0, 4, 8}, PdlCase{5, 40, 1, 0},
                                           PdlCase{5, 40, 2, 8}));

}  // namespace
}  // namespace hearth::cuda::testing
