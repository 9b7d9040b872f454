// Kernel lab benchmark (run on the GPU machine): measures the two ceilings (device copy
// bandwidth, bf16 GEMM rate) and then each kernel against them, plus a synthetic
// Llama-3.1-8B-shaped decode step (bf16 and 4-bit) and 4096-token prefill built from the
// kernels alone, to see how close a forward pass can get before any model code.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/affine_quant.cuh"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope_kv_write.cuh"
#include "kernels/cuda/sampling.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;

class Bench {
 public:
  explicit Bench(DeviceContext& ctx) : ctx_(ctx), gemm_(ctx) {}

  DeviceBuffer bf16(size_t n, float scale = 0.02f) {
    auto buf = ctx_.allocate(n * sizeof(Bf16), "bench");
    check(buf.status(), "allocate");
    CK(fill_random_bf16(buf->as<Bf16>(), n, seed_++, scale, ctx_.stream()));
    return std::move(buf).value();
  }
  DeviceBuffer u32(size_t n) {
    auto buf = ctx_.allocate(n * sizeof(uint32_t), "bench");
    check(buf.status(), "allocate");
    CK(fill_random_u32(buf->as<uint32_t>(), n, seed_++, ctx_.stream()));
    return std::move(buf).value();
  }
  DeviceBuffer raw(size_t bytes) {
    auto buf = ctx_.allocate(bytes, "bench");
    check(buf.status(), "allocate");
    return std::move(buf).value();
  }
  template <typename T>
  DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer buf = raw(v.size() * sizeof(T) + 16);
    CK(cudaMemcpy(buf.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return buf;
  }

  double copy_bandwidth() { return measure_copy_bandwidth(ctx_.stream()); }

  double gemm_rate(int m, int n, int k) {
    DeviceBuffer x = bf16(size_t(m) * k, 1.0f);
    DeviceBuffer w = bf16(size_t(n) * k, 1.0f);
    DeviceBuffer y = raw(size_t(m) * n * 2);
    GemmShape s{m, n, k, k, k, n, GemmOut::kBf16, false};
    double ms = median_ms(ctx_.stream(),
                          [&](int) { CK(gemm_.run(s, x.as<Bf16>(), w.as<Bf16>(), y.data())); });
    double rate = 2.0 * m * n * k / (ms * 1e-3);
    std::printf("GEMM bf16 %dx%dx%d: %.3f ms -> %.1f TFLOP/s\n", m, n, k, ms, rate / 1e12);
    return rate;
  }

  // Batch-1 GEMV through cuBLASLt and through the 4-bit affine kernel, rotating weight
  // copies so the L2 (60 MB) cannot serve them.
  void gemv(int n, int k, double copy_bw) {
    size_t elems = size_t(n) * k;
    int copies = std::max<int>(2, static_cast<int>((size_t{512} << 20) / (elems * 2)));
    std::vector<DeviceBuffer> ws;
    for (int i = 0; i < copies; ++i) ws.push_back(bf16(elems));
    DeviceBuffer x = bf16(k, 1.0f);
    DeviceBuffer y = raw(size_t(n) * 4);
    GemmShape s{1, n, k, k, k, n, GemmOut::kBf16, false};
    double ms = median_ms(
        ctx_.stream(),
        [&](int i) { CK(gemm_.run(s, x.as<Bf16>(), ws[i % copies].as<Bf16>(), y.data())); }, 50);
    double bw = elems * 2.0 / (ms * 1e-3);
    std::printf("GEMV bf16 cuBLASLt n=%d k=%d: %.1f us  %.3f TB/s  (%.0f%% of copy)\n", n, k,
                ms * 1e3, bw / 1e12, 100 * bw / copy_bw);
    ws.clear();
    int groups = k / 64;
    size_t qbytes = elems / 2 + size_t(n) * groups * 4;
    int qcopies = std::max<int>(2, static_cast<int>((size_t{512} << 20) / qbytes));
    std::vector<DeviceBuffer> packed;
    std::vector<DeviceBuffer> scales;
    for (int i = 0; i < qcopies; ++i) {
      packed.push_back(u32(elems / 8));
      scales.push_back(bf16(size_t(n) * groups * 2, 0.01f));
    }
    ms = median_ms(
        ctx_.stream(),
        [&](int i) {
          AffineQuantWeight w{packed[i % qcopies].as<uint32_t>(),
                              scales[i % qcopies].as<Bf16>(),
                              scales[i % qcopies].as<Bf16>() + size_t(n) * groups,
                              false,
                              n,
                              k,
                              4,
                              64};
          CK(affine_gemv(w, x.as<Bf16>(), k, 1, y.data(), n, false,
                         ctx_.properties().multiProcessorCount, ctx_.stream()));
        },
        50);
    bw = qbytes / (ms * 1e-3);
    std::printf("GEMV 4-bit affine g64 n=%d k=%d: %.1f us  %.3f TB/s  (%.0f%% of copy)\n", n, k,
                ms * 1e3, bw / 1e12, 100 * bw / copy_bw);
  }

  void attention(int q_len, int kv_len, double copy_bw) {
    const int q_heads = 32, kv_heads = 8, hd = 128, bs = 16;
    int blocks = (kv_len + bs - 1) / bs;
    DeviceBuffer q = bf16(size_t(q_len) * q_heads * hd, 1.0f);
    DeviceBuffer k = bf16(size_t(blocks) * bs * kv_heads * hd, 1.0f);
    DeviceBuffer v = bf16(size_t(blocks) * bs * kv_heads * hd, 1.0f);
    DeviceBuffer out = raw(size_t(q_len) * q_heads * hd * 2);
    std::vector<int32_t> table(blocks);
    for (int i = 0; i < blocks; ++i) table[i] = (i * 7919) % blocks;  // scattered blocks
    DeviceBuffer dt = upload(table);
    DeviceBuffer qs = upload(std::vector<int32_t>{0, q_len});
    DeviceBuffer kl = upload(std::vector<int32_t>{kv_len});
    PagedAttentionArgs a;
    a.q = q.as<Bf16>();
    a.ld_q = q_heads * hd;
    a.k_cache = k.as<Bf16>();
    a.v_cache = v.as<Bf16>();
    a.block_tables = dt.as<int32_t>();
    a.ld_block_tables = blocks;
    a.query_start = qs.as<int32_t>();
    a.kv_lens = kl.as<int32_t>();
    a.out = out.as<Bf16>();
    a.ld_out = q_heads * hd;
    a.seqs = 1;
    a.tokens = q_len;
    a.q_heads = q_heads;
    a.kv_heads = kv_heads;
    a.head_dim = hd;
    a.block_size = bs;
    a.scale = 0.088f;
    a.num_splits = paged_attention_num_splits(q_len, q_heads, kv_heads, kv_len,
                                              ctx_.properties().multiProcessorCount);
    DeviceBuffer ws = raw(paged_attention_workspace_bytes(q_len, q_heads, hd, a.num_splits) + 16);
    a.workspace = ws.as<float>();
    double ms = median_ms(ctx_.stream(), [&](int) { CK(paged_attention(a, ctx_.stream())); });
    if (q_len == 1) {
      double bytes = 2.0 * kv_len * kv_heads * hd * 2;
      std::printf("attention decode kv=%d splits=%d: %.1f us  %.3f TB/s (%.0f%% of copy)\n", kv_len,
                  a.num_splits, ms * 1e3, bytes / (ms * 1e-3) / 1e12,
                  100 * bytes / (ms * 1e-3) / copy_bw);
    } else {
      double flops = 4.0 * q_heads * hd * double(q_len) * kv_len / 2;
      std::printf("attention prefill q=%d kv=%d: %.2f ms  %.1f TFLOP/s (causal)\n", q_len, kv_len,
                  ms, flops / (ms * 1e-3) / 1e12);
    }
  }

  void sampling(int vocab) {
    DeviceBuffer logits = raw(size_t(vocab) * 4);
    std::vector<float> host(vocab);
    for (int i = 0; i < vocab; ++i) host[i] = static_cast<float>((i * 2654435761u) % 1000) / 100;
    CK(cudaMemcpy(logits.data(), host.data(), vocab * 4, cudaMemcpyHostToDevice));
    DeviceBuffer out = raw(16);
    for (int mode = 0; mode < 2; ++mode) {
      SamplingRow p;
      if (mode == 0) p.temperature = 0.0f;
      if (mode == 1) {
        p.top_k = 50;
        p.top_p = 0.9f;
        p.min_p = 0.05f;
      }
      DeviceBuffer dp = upload(std::vector<SamplingRow>{p});
      SamplingArgs a;
      a.logits = logits.as<float>();
      a.ld_logits = vocab;
      a.rows = 1;
      a.vocab = vocab;
      a.params = dp.as<SamplingRow>();
      a.out_tokens = out.as<int32_t>();
      double ms = median_ms(ctx_.stream(), [&](int) { CK(sample_tokens(a, ctx_.stream())); });
      std::printf("sampling vocab=%d %s: %.1f us\n", vocab,
                  mode == 0 ? "greedy" : "top-k 50 + top-p 0.9 + min-p", ms * 1e3);
    }
  }

  DeviceContext& ctx_;
  GemmBf16 gemm_;
  uint64_t seed_ = 1;
};

}  // namespace
}  // namespace hearth::cuda::dev

namespace hearth::cuda::dev {
namespace {

// A Llama-3.1-8B-shaped stack of the kernels with random weights: what a forward pass
// built on them costs, without model code, weight loading or host work per step.
struct Shape8B {
  int hidden = 4096, layers = 32, q_heads = 32, kv_heads = 8, hd = 128, inter = 14336;
  int vocab = 128256;
  int qkv() const { return (q_heads + 2 * kv_heads) * hd; }
};

struct Linear {
  DeviceBuffer w;       // bf16 [n, k]
  DeviceBuffer packed;  // 4-bit [n, k / 8] u32
  DeviceBuffer sb;      // scales then biases, bf16 [2, n, k / 64]
  int n = 0, k = 0;
};

void run_stack(Bench& b, bool quant4, int tokens, double copy_bw, double gemm_rate) {
  const Shape8B s;
  DeviceContext& ctx = b.ctx_;
  cudaStream_t st = ctx.stream();
  auto make = [&](int n, int k) {
    Linear l;
    l.n = n;
    l.k = k;
    if (quant4) {
      l.packed = b.u32(size_t(n) * k / 8);
      l.sb = b.bf16(size_t(n) * (k / 64) * 2, 0.01f);
    } else {
      l.w = b.bf16(size_t(n) * k);
    }
    return l;
  };
  std::vector<Linear> qkv, o, gu, down;
  std::vector<DeviceBuffer> norm1, norm2, kc, vc;
  const int max_ctx = 4096 + 256;
  for (int l = 0; l < s.layers; ++l) {
    qkv.push_back(make(s.qkv(), s.hidden));
    o.push_back(make(s.hidden, s.q_heads * s.hd));
    gu.push_back(make(2 * s.inter, s.hidden));
    down.push_back(make(s.hidden, s.inter));
    norm1.push_back(b.bf16(s.hidden, 1.0f));
    norm2.push_back(b.bf16(s.hidden, 1.0f));
    kc.push_back(b.bf16(size_t(max_ctx) * s.kv_heads * s.hd, 1.0f));
    vc.push_back(b.bf16(size_t(max_ctx) * s.kv_heads * s.hd, 1.0f));
  }
  Linear lm_head = make(s.vocab, s.hidden);
  DeviceBuffer final_norm = b.bf16(s.hidden, 1.0f);
  const int T = tokens;
  DeviceBuffer resid = b.bf16(size_t(T) * s.hidden, 1.0f);
  DeviceBuffer xn = b.raw(size_t(T) * s.hidden * 2);
  DeviceBuffer qkv_out = b.raw(size_t(T) * s.qkv() * 2);
  DeviceBuffer q = b.raw(size_t(T) * s.hidden * 2);
  DeviceBuffer attn = b.raw(size_t(T) * s.hidden * 2);
  DeviceBuffer delta = b.raw(size_t(T) * s.hidden * 2);
  DeviceBuffer gu_out = b.raw(size_t(T) * 2 * s.inter * 2);
  DeviceBuffer act = b.raw(size_t(T) * s.inter * 2);
  DeviceBuffer logits = b.raw(size_t(s.vocab) * 4);
  DeviceBuffer token = b.raw(16);
  const int start = T == 1 ? 128 : 0;  // decode after a 128-token prompt
  std::vector<int32_t> pos(T);
  std::vector<int64_t> slots(T);
  for (int i = 0; i < T; ++i) pos[i] = start + i, slots[i] = start + i;
  std::vector<int32_t> table((max_ctx + 15) / 16);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  DeviceBuffer dpos = b.upload(pos), dslots = b.upload(slots), dtable = b.upload(table);
  DeviceBuffer dqs = b.upload(std::vector<int32_t>{0, T});
  DeviceBuffer dkl = b.upload(std::vector<int32_t>{start + T});
  std::vector<float> freqs(s.hd / 2);
  for (int i = 0; i < s.hd / 2; ++i) freqs[i] = 1.0f / std::pow(500000.0f, 2.0f * i / s.hd);
  DeviceBuffer dfreq = b.upload(freqs);
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  DeviceBuffer dparams = b.upload(std::vector<SamplingRow>{greedy});
  int splits = paged_attention_num_splits(T, s.q_heads, s.kv_heads, start + T,
                                          ctx.properties().multiProcessorCount);
  DeviceBuffer attn_ws = b.raw(paged_attention_workspace_bytes(T, s.q_heads, s.hd, splits) + 16);

  auto linear = [&](const Linear& l, const DeviceBuffer& x, int m, void* y, bool f32) {
    if (quant4) {
      AffineQuantWeight w{l.packed.as<uint32_t>(),
                          l.sb.as<Bf16>(),
                          l.sb.as<Bf16>() + size_t(l.n) * (l.k / 64),
                          false,
                          l.n,
                          l.k,
                          4,
                          64};
      CK(affine_gemv(w, x.as<Bf16>(), l.k, m, y, l.n, f32, ctx.properties().multiProcessorCount,
                     st));
    } else {
      GemmShape g{m, l.n, l.k, l.k, l.k, l.n, f32 ? GemmOut::kF32 : GemmOut::kBf16, false};
      CK(b.gemm_.run(g, x.as<Bf16>(), l.w.as<Bf16>(), y));
    }
  };
  auto step = [&](int) {
    for (int l = 0; l < s.layers; ++l) {
      CK(rmsnorm_residual(l == 0 ? nullptr : delta.as<Bf16>(), s.hidden, resid.as<Bf16>(), s.hidden,
                          norm1[l].as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, T, s.hidden,
                          st));
      linear(qkv[l], xn, T, qkv_out.data(), false);
      RopeKvWriteArgs r;
      r.qkv = qkv_out.as<Bf16>();
      r.ld_qkv = s.qkv();
      r.positions = dpos.as<int32_t>();
      r.slots = dslots.as<int64_t>();
      r.inv_freq = dfreq.as<float>();
      r.q_out = q.as<Bf16>();
      r.ld_q_out = s.hidden;
      r.k_cache = kc[l].as<Bf16>();
      r.v_cache = vc[l].as<Bf16>();
      r.tokens = T;
      r.q_heads = s.q_heads;
      r.kv_heads = s.kv_heads;
      r.head_dim = s.hd;
      r.rotary_dim = s.hd;
      CK(rope_kv_write(r, st));
      PagedAttentionArgs a;
      a.q = q.as<Bf16>();
      a.ld_q = s.hidden;
      a.k_cache = kc[l].as<Bf16>();
      a.v_cache = vc[l].as<Bf16>();
      a.block_tables = dtable.as<int32_t>();
      a.ld_block_tables = static_cast<int64_t>(table.size());
      a.query_start = dqs.as<int32_t>();
      a.kv_lens = dkl.as<int32_t>();
      a.out = attn.as<Bf16>();
      a.ld_out = s.hidden;
      a.seqs = 1;
      a.tokens = T;
      a.q_heads = s.q_heads;
      a.kv_heads = s.kv_heads;
      a.head_dim = s.hd;
      a.block_size = 16;
      a.scale = 0.0884f;
      a.num_splits = splits;
      a.workspace = attn_ws.as<float>();
      CK(paged_attention(a, st));
      linear(o[l], attn, T, delta.data(), false);
      CK(rmsnorm_residual(delta.as<Bf16>(), s.hidden, resid.as<Bf16>(), s.hidden,
                          norm2[l].as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, T, s.hidden,
                          st));
      linear(gu[l], xn, T, gu_out.data(), false);
      CK(gated_activation(GatedActivation::kSilu, gu_out.as<Bf16>(), 2 * s.inter,
                          gu_out.as<Bf16>() + s.inter, 2 * s.inter, act.as<Bf16>(), s.inter, T,
                          s.inter, st));
      linear(down[l], act, T, delta.data(), false);
    }
    CK(rmsnorm_residual(delta.as<Bf16>(), s.hidden, resid.as<Bf16>(), s.hidden,
                        final_norm.as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, T, s.hidden,
                        st));
    // Logits for the last row only.
    if (quant4) {
      AffineQuantWeight w{lm_head.packed.as<uint32_t>(),
                          lm_head.sb.as<Bf16>(),
                          lm_head.sb.as<Bf16>() + size_t(s.vocab) * (s.hidden / 64),
                          false,
                          s.vocab,
                          s.hidden,
                          4,
                          64};
      CK(affine_gemv(w, xn.as<Bf16>() + size_t(T - 1) * s.hidden, s.hidden, 1, logits.data(),
                     s.vocab, true, ctx.properties().multiProcessorCount, st));
    } else {
      GemmShape g{1, s.vocab, s.hidden, s.hidden, s.hidden, s.vocab, GemmOut::kF32, false};
      CK(b.gemm_.run(g, xn.as<Bf16>() + size_t(T - 1) * s.hidden, lm_head.w.as<Bf16>(),
                     logits.data()));
    }
    SamplingArgs sa;
    sa.logits = logits.as<float>();
    sa.ld_logits = s.vocab;
    sa.rows = 1;
    sa.vocab = s.vocab;
    sa.params = dparams.as<SamplingRow>();
    sa.out_tokens = token.as<int32_t>();
    CK(sample_tokens(sa, st));
  };
  double weight_bytes = s.layers * (double(s.qkv()) * s.hidden + double(s.hidden) * s.hidden +
                                    2.0 * s.inter * s.hidden + double(s.hidden) * s.inter) +
                        double(s.vocab) * s.hidden;
  weight_bytes *= quant4 ? (0.5 + 4.0 / 64) : 2.0;
  const char* kind = quant4 ? "4-bit g64" : "bf16";
  if (T == 1) {
    double eager = median_ms(st, step, 10, 2);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    step(0);
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    double graphed = median_ms(
        st, [&](int) { CK(cudaGraphLaunch(exec, st)); }, 30, 3);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    double floor_ms = weight_bytes / copy_bw * 1e3;
    std::printf(
        "decode step 8B %s (ctx 128): eager %.3f ms (%.1f tok/s), graph %.3f ms (%.1f tok/s); "
        "floor %.3f ms (%.1f tok/s, weights %.2f GB excl. embedding) -> %.0f%% of floor\n",
        kind, eager, 1e3 / eager, graphed, 1e3 / graphed, floor_ms, 1e3 / floor_ms,
        weight_bytes / 1e9, 100 * floor_ms / graphed);
  } else {
    double ms = median_ms(st, step, 5, 1);
    double flops = 2.0 * 8.03e9 * T + s.layers * 4.0 * s.q_heads * s.hd * double(T) * T / 2;
    std::printf(
        "prefill %d tokens 8B %s: %.1f ms -> %.0f tok/s, %.1f TFLOP/s = %.0f%% of "
        "measured GEMM rate\n",
        T, kind, ms, T / (ms * 1e-3), flops / (ms * 1e-3) / 1e12,
        100 * flops / (ms * 1e-3) / gemm_rate);
  }
}

int run(int argc, char** argv) {
  std::string only = argc > 1 ? argv[1] : "all";
  auto ctx = DeviceContext::create({});
  check(ctx.status(), "device");
  Bench b(**ctx);
  std::printf("device: %s, %d SMs\n", (*ctx)->properties().name,
              (*ctx)->properties().multiProcessorCount);
  double copy_bw = b.copy_bandwidth();
  double rate = b.gemm_rate(8192, 8192, 8192);
  if (only == "all" || only == "kernels") {
    for (auto [n, k] : std::vector<std::pair<int, int>>{
             {4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}}) {
      b.gemv(n, k, copy_bw);
    }
    b.attention(1, 4096, copy_bw);
    b.attention(1, 32768, copy_bw);
    b.attention(4096, 4096, copy_bw);
    b.sampling(128256);
    b.gemm_rate(4096, 6144, 4096);
    b.gemm_rate(4096, 28672, 4096);
    b.gemm_rate(4096, 4096, 14336);
  }
  if (only == "all" || only == "model") {
    run_stack(b, false, 1, copy_bw, rate);
    run_stack(b, true, 1, copy_bw, rate);
    run_stack(b, false, 4096, copy_bw, rate);
  }
  return 0;
}

}  // namespace
}  // namespace hearth::cuda::dev

int main(int argc, char** argv) {
  try {
    return hearth::cuda::dev::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
}
