// Lab for issue 5 (8B bf16 batch-1 decode at >= 90% of the bandwidth floor): each decode
// GEMV shape alone, in graph-replayed chains over rotating weight copies (> 60 MB L2), old
// kernel vs the GemvArgs variants (split rows, grid sizes, programmatic dependent launch),
// then a full 8B-shaped decode step (random weights, ctx 128) unfused vs fused (RMSNorm
// prologue, residual-add and SiLU epilogues), eager and graph, against the floor measured in
// the same run. Every variant is checked against the old kernels before it is timed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dev/cuda/fill.cuh"
#include "dev/cuda/lab.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gated_activation.cuh"
#include "kernels/cuda/gemv_bf16.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope_kv_write.cuh"

namespace hearth::cuda::dev {
namespace {

using Bf16 = __nv_bfloat16;

struct Lab {
  DeviceContext& ctx;
  uint64_t seed = 1;
  int sms() const { return ctx.properties().multiProcessorCount; }
  cudaStream_t st() const { return ctx.stream(); }

  DeviceBuffer bf16(size_t n, float scale = 0.02f) {
    auto buf = ctx.allocate(n * sizeof(Bf16) + 16, "lab");
    check(buf.status(), "allocate");
    CK(fill_random_bf16(buf->as<Bf16>(), n, seed++, scale, st()));
    return std::move(buf).value();
  }
  DeviceBuffer raw(size_t bytes) {
    auto buf = ctx.allocate(bytes + 16, "lab");
    check(buf.status(), "allocate");
    CK(cudaMemsetAsync(buf->data(), 0, bytes, st()));
    return std::move(buf).value();
  }
  template <typename T>
  DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer buf = raw(v.size() * sizeof(T));
    CK(cudaMemcpy(buf.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return buf;
  }
  template <typename T>
  std::vector<T> download(const DeviceBuffer& b, size_t n) {
    CK(cudaStreamSynchronize(st()));
    std::vector<T> v(n);
    CK(cudaMemcpy(v.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  // Median ms of one replay of a graph captured from fn().
  double graph_ms(const std::function<void()>& fn, int reps = 20) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st(), cudaStreamCaptureModeThreadLocal));
    fn();
    CK(cudaStreamEndCapture(st(), &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    double ms = median_ms(
        st(), [&](int) { CK(cudaGraphLaunch(exec, st())); }, reps, 3);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms;
  }
};

float bf(uint16_t bits) {
  uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Max |a - b| / max |b| over bf16 vectors (0 = bit-identical values).
double rel_diff_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(bf(a[i]))) return INFINITY;
    num = std::max(num, double(std::fabs(bf(a[i]) - bf(b[i]))));
    den = std::max(den, double(std::fabs(bf(b[i]))));
  }
  return num / (den > 0 ? den : 1);
}
double rel_diff_f32(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / (den > 0 ? den : 1);
}

struct Variant {
  const char* name;
  bool old_kernel;
  int split;
  bool pdl;
  int grid_mode;  // 0 auto, 1 balanced (every warp the same task count), 2 one block per SM
  int l2_prefetch;
  int gu_block = 0;  // gated shapes: GemvArgs::gate_up_block (b gate rows, then their b up rows)
};

int grid_for(const Variant& v, int tasks, int sms) {
  if (v.split == 0 || v.grid_mode == 0) return 0;  // the kernel's own choice
  const int per_block = 16 / v.split;
  if (v.grid_mode == 1) {
    const int cap = 2 * sms;
    const int iters = (tasks + per_block * cap - 1) / (per_block * cap);
    return (tasks + per_block * iters - 1) / (per_block * iters);
  }
  if (v.grid_mode == 2) return std::min(sms, (tasks + per_block - 1) / per_block);
  return 0;
}

// W1 (commit cbf3cf1): PDL won everywhere; split 2 on qkv / gate_up / lm_head, split 1 on o /
// down; the bulk (TMA) L2 prefetch lost 2-35 % and is gone. W2: the auto split, the norm
// weights and old residual loaded early, lane L2 prefetch of the first rows.
const Variant kVariants[] = {
    {"old gemv_bf16", true, 1, false, 0, 0},
    {"v2 split1 pdl (W1)", false, 1, true, 0, 0},
    {"v2 split2 pdl balanced (W1)", false, 2, true, 1, 0},
    {"v2 auto", false, 0, false, 0, 0},
    {"v2 auto pdl", false, 0, true, 0, 0},
    {"v2 auto pdl gate/up alternating", false, 0, true, 0, 0, 1},
    {"v2 split1 pdl gate/up alternating", false, 1, true, 0, 0, 1},
    {"v2 auto pdl gate/up blocks of 16", false, 0, true, 0, 0, 16},
    {"v2 auto pdl gate/up blocks of 128", false, 0, true, 0, 0, 128},
    {"v2 auto pdl gate/up blocks of 1024", false, 0, true, 0, 0, 1024},
};

// One decode GEMV shape: a chain of `copies` launches over distinct weight copies, captured
// as one graph; time per GEMV = replay / copies.
void shape_chain(Lab& lab, const char* what, int n, int k, GemvEpilogue epi, bool f32,
                 double copy_bw) {
  const bool gatedv = epi == GemvEpilogue::kGatedSilu;
  const int wrows = gatedv ? 2 * n : n;
  const size_t elems = size_t(wrows) * k;
  const int copies = std::max<int>(4, static_cast<int>((size_t{768} << 20) / (elems * 2)));
  std::vector<DeviceBuffer> ws;
  for (int i = 0; i < copies; ++i) ws.push_back(lab.bf16(elems));
  // Gated: the same weights in blocks of b gate rows, then their b up rows (one set of
  // copies per block size, made when a variant first asks).
  std::vector<std::pair<int, std::vector<DeviceBuffer>>> blocked;
  auto blocked_copies = [&](int b) -> std::vector<DeviceBuffer>& {
    for (auto& e : blocked) {
      if (e.first == b) return e.second;
    }
    blocked.emplace_back(b, std::vector<DeviceBuffer>{});
    auto& set = blocked.back().second;
    const size_t row = size_t(2) * k;  // bytes
    for (int i = 0; i < copies; ++i) {
      set.push_back(lab.raw(elems * 2));
      for (int p = 0; p < 2; ++p) {
        CK(cudaMemcpy2DAsync(set[i].as<Bf16>() + size_t(p) * b * k, 2 * b * row,
                             ws[i].as<Bf16>() + size_t(p) * n * k, b * row, b * row, n / b,
                             cudaMemcpyDeviceToDevice, lab.st()));
      }
    }
    return set;
  };
  DeviceBuffer x = lab.bf16(k, 1.0f);
  const size_t ybytes = size_t(wrows) * 4;
  DeviceBuffer y = lab.raw(ybytes), yref = lab.raw(ybytes), act_ref = lab.raw(size_t(n) * 2);
  auto old_call = [&](int i, void* out) {
    CK(gemv_bf16(x.as<Bf16>(), k, ws[i].as<Bf16>(), k, out, wrows, f32, false, 1, wrows, k,
                 lab.sms(), lab.st()));
    if (gatedv) {
      CK(gated_activation(GatedActivation::kSilu, static_cast<Bf16*>(out), wrows,
                          static_cast<Bf16*>(out) + n, wrows, act_ref.as<Bf16>(), n, 1, n,
                          lab.st()));
    }
  };
  auto new_call = [&](const Variant& v, int i, void* out) {
    GemvArgs a;
    a.x = x.as<Bf16>();
    a.ldx = k;
    a.w = v.gu_block > 0 ? blocked_copies(v.gu_block)[i].as<Bf16>() : ws[i].as<Bf16>();
    a.gate_up_block = v.gu_block;
    a.ldw = k;
    a.y = out;
    a.ldy = n;
    a.y_f32 = f32;
    a.epilogue = epi;
    a.m = 1;
    a.n = n;
    a.k = k;
    a.sm_count = lab.sms();
    a.split = v.split;
    a.pdl = v.pdl;
    a.grid = grid_for(v, n, lab.sms());
    a.l2_prefetch = v.l2_prefetch;
    CK(gemv_bf16(a, lab.st()));
  };
  // Reference: the old kernel (+ the unfused activation) on copy 0.
  old_call(0, yref.data());
  const size_t out_elems = gatedv ? n : wrows;
  std::vector<uint16_t> ref16;
  std::vector<float> ref32;
  if (f32) {
    ref32 = lab.download<float>(yref, out_elems);
  } else {
    ref16 = lab.download<uint16_t>(gatedv ? act_ref : yref, out_elems);
  }
  const double bytes = double(elems) * 2;
  double base_us = 0;
  for (const Variant& v : kVariants) {
    if (v.gu_block > 0 && !gatedv) continue;
    double err = 0;
    if (!v.old_kernel) {
      CK(cudaMemsetAsync(y.data(), 0xff, ybytes, lab.st()));
      new_call(v, 0, y.data());
      err = f32 ? rel_diff_f32(lab.download<float>(y, out_elems), ref32)
                : rel_diff_bf16(lab.download<uint16_t>(y, out_elems), ref16);
      // split 1 keeps the old summation order: bit-identical; other splits reorder the f32
      // sum (one bf16 ulp at most, relative to the largest output).
      const double tol = v.split == 1 ? 0.0 : 1e-2;
      if (!(err <= tol)) {
        std::printf("  %-10s %-26s FAILED validation: rel diff %.3g > %.3g\n", what, v.name, err,
                    tol);
        std::fflush(stdout);
        continue;
      }
    }
    double ms = lab.graph_ms([&] {
      for (int i = 0; i < copies; ++i) {
        if (v.old_kernel) {
          old_call(i, y.data());
        } else {
          new_call(v, i, y.data());
        }
      }
    });
    double us = ms * 1e3 / copies;
    if (v.old_kernel) base_us = us;
    double bw = bytes / (us * 1e-6);
    std::printf(
        "  %-10s n=%-6d k=%-5d %-26s %7.2f us  %.3f TB/s  %3.0f%% of copy  x%.2f vs old%s\n", what,
        n, k, v.name, us, bw / 1e12, 100 * bw / copy_bw, base_us / us,
        err == 0 ? "  (bit-identical)" : "");
    std::fflush(stdout);
  }
}

// ---- the full decode step ----

struct Shape8B {
  int hidden = 4096, layers = 32, q_heads = 32, kv_heads = 8, hd = 128, inter = 14336;
  int vocab = 128256;
  int qkv() const { return (q_heads + 2 * kv_heads) * hd; }
};

struct StepVariant {
  const char* name;
  bool old_kernel;
  bool fused;
  bool pdl;
  int split;
  int l2_prefetch;
  int next;  // 1: qkv prefetches o's weights into L2; 2: also o the head of gate_up's
  int rope;  // 0: rope_kv_write kernel; 1: in the qkv GEMV's epilogue (2, 3: at split 2, 4;
             // auto picks 1); -1: skipped (timing only)
  int attn;  // 0: paged_attention; 1: with PDL (prologue before the wait, early trigger); -1:
             // skipped
  int attn_splits = 0;  // 0: paged_attention_num_splits (the model's choice)
  bool o_l2 = false;   // the o GEMV pulls its first rows into L2 before its wait (during attention)
  int attn_warps = 0;  // PagedAttentionArgs::block_warps (0: src's choice, 8 at batch 1)
  int gu_block = 0;    // gate_up read as blocks of b gate rows, then b up rows (timing only)
};

void decode_step(Lab& lab, double copy_bw) {
  const Shape8B s;
  cudaStream_t st = lab.st();
  std::vector<DeviceBuffer> qkv, o, gu, down, norm1, norm2, kc, vc;
  const int ctx_len = 128, max_ctx = 256;
  for (int l = 0; l < s.layers; ++l) {
    qkv.push_back(lab.bf16(size_t(s.qkv()) * s.hidden));
    o.push_back(lab.bf16(size_t(s.hidden) * s.hidden));
    gu.push_back(lab.bf16(size_t(2) * s.inter * s.hidden));
    down.push_back(lab.bf16(size_t(s.hidden) * s.inter));
    norm1.push_back(lab.bf16(s.hidden, 1.0f));
    norm2.push_back(lab.bf16(s.hidden, 1.0f));
    kc.push_back(lab.bf16(size_t(max_ctx) * s.kv_heads * s.hd, 1.0f));
    vc.push_back(lab.bf16(size_t(max_ctx) * s.kv_heads * s.hd, 1.0f));
  }
  DeviceBuffer lm_head = lab.bf16(size_t(s.vocab) * s.hidden);
  DeviceBuffer final_norm = lab.bf16(s.hidden, 1.0f);
  DeviceBuffer resid0 = lab.bf16(s.hidden, 1.0f);
  DeviceBuffer resid = lab.raw(size_t(s.hidden) * 2), xn = lab.raw(size_t(s.hidden) * 2);
  DeviceBuffer qkv_out = lab.raw(size_t(s.qkv()) * 2), q = lab.raw(size_t(s.hidden) * 2);
  DeviceBuffer attn = lab.raw(size_t(s.hidden) * 2), delta = lab.raw(size_t(s.hidden) * 2);
  DeviceBuffer gu_out = lab.raw(size_t(2) * s.inter * 2), act = lab.raw(size_t(s.inter) * 2);
  DeviceBuffer logits = lab.raw(size_t(s.vocab) * 4);
  DeviceBuffer dpos = lab.upload(std::vector<int32_t>{ctx_len});
  DeviceBuffer dslots = lab.upload(std::vector<int64_t>{ctx_len});
  std::vector<int32_t> table(max_ctx / 16);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  DeviceBuffer dtable = lab.upload(table);
  DeviceBuffer dqs = lab.upload(std::vector<int32_t>{0, 1});
  DeviceBuffer dkl = lab.upload(std::vector<int32_t>{ctx_len + 1});
  std::vector<float> freqs(s.hd / 2);
  for (int i = 0; i < s.hd / 2; ++i) freqs[i] = 1.0f / std::pow(500000.0f, 2.0f * i / s.hd);
  DeviceBuffer dfreq = lab.upload(freqs);
  const int splits = paged_attention_num_splits(1, s.q_heads, s.kv_heads, ctx_len + 1, lab.sms());
  DeviceBuffer attn_ws =
      lab.raw(paged_attention_workspace_bytes(1, s.q_heads, s.hd, std::max(splits, 8)));

  auto gemv = [&](const StepVariant& v, const DeviceBuffer& w, const Bf16* x, int n, int k, void* y,
                  bool f32, GemvEpilogue epi, const Bf16* norm, const DeviceBuffer* next = nullptr,
                  size_t next_bytes = 0, int l2 = -1) {
    if (v.old_kernel) {
      CK(gemv_bf16(x, k, w.as<Bf16>(), k, y, n, f32, false, 1, n, k, lab.sms(), st));
      return;
    }
    GemvArgs a;
    a.x = x;
    a.ldx = k;
    a.w = w.as<Bf16>();
    a.ldw = k;
    a.y = y;
    a.ldy = n;
    a.y_f32 = f32;
    a.epilogue = epi;
    a.norm_weight = norm;
    a.norm_eps = 1e-5f;
    a.m = 1;
    a.n = n;
    a.k = k;
    a.sm_count = lab.sms();
    a.split = v.split;
    a.pdl = v.pdl;
    a.l2_prefetch = l2 >= 0 ? l2 : v.l2_prefetch;
    a.gate_up_block = epi == GemvEpilogue::kGatedSilu ? v.gu_block : 0;
    if (next != nullptr) {
      a.prefetch = next->data();
      a.prefetch_bytes = next_bytes;
    }
    CK(gemv_bf16(a, st));
  };
  auto rope_args = [&](int l) {
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
    r.tokens = 1;
    r.q_heads = s.q_heads;
    r.kv_heads = s.kv_heads;
    r.head_dim = s.hd;
    r.rotary_dim = s.hd;
    return r;
  };
  auto attention = [&](int l, int rope, int attn_mode, int attn_splits, int attn_warps) {
    if (rope == 0) CK(rope_kv_write(rope_args(l), st));
    if (attn_mode < 0) return;
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
    a.tokens = 1;
    a.q_heads = s.q_heads;
    a.kv_heads = s.kv_heads;
    a.head_dim = s.hd;
    a.block_size = 16;
    a.scale = 0.0884f;
    a.num_splits = attn_splits > 0 ? attn_splits : splits;
    a.block_warps = attn_warps;
    a.workspace = attn_ws.as<float>();
    a.pdl = attn_mode == 1;
    CK(paged_attention(a, st));
  };
  auto step = [&](const StepVariant& v) {
    Bf16* res = resid.as<Bf16>();
    for (int l = 0; l < s.layers; ++l) {
      if (!v.fused) {
        CK(rmsnorm_residual(l == 0 ? nullptr : delta.as<Bf16>(), s.hidden, res, s.hidden,
                            norm1[l].as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, 1, s.hidden,
                            st));
        gemv(v, qkv[l], xn.as<Bf16>(), s.qkv(), s.hidden, qkv_out.data(), false,
             GemvEpilogue::kStore, nullptr);
        attention(l, v.rope, v.attn, v.attn_splits, v.attn_warps);
        gemv(v, o[l], attn.as<Bf16>(), s.hidden, s.hidden, delta.data(), false,
             GemvEpilogue::kStore, nullptr);
        CK(rmsnorm_residual(delta.as<Bf16>(), s.hidden, res, s.hidden, norm2[l].as<Bf16>(), 0.0f,
                            1e-5f, xn.as<Bf16>(), s.hidden, 1, s.hidden, st));
        gemv(v, gu[l], xn.as<Bf16>(), 2 * s.inter, s.hidden, gu_out.data(), false,
             GemvEpilogue::kStore, nullptr);
        CK(gated_activation(GatedActivation::kSilu, gu_out.as<Bf16>(), 2 * s.inter,
                            gu_out.as<Bf16>() + s.inter, 2 * s.inter, act.as<Bf16>(), s.inter, 1,
                            s.inter, st));
        gemv(v, down[l], act.as<Bf16>(), s.hidden, s.inter, delta.data(), false,
             GemvEpilogue::kStore, nullptr);
      } else {
        if (v.rope >= 1) {
          GemvArgs a;
          a.x = res;
          a.ldx = s.hidden;
          a.w = qkv[l].as<Bf16>();
          a.ldw = s.hidden;
          a.epilogue = GemvEpilogue::kRopeKvWrite;
          a.rope = rope_args(l);
          a.norm_weight = norm1[l].as<Bf16>();
          a.norm_eps = 1e-5f;
          a.m = 1;
          a.n = s.qkv();
          a.k = s.hidden;
          a.sm_count = lab.sms();
          a.split = v.rope == 2 ? 2 : v.rope == 3 ? 4 : v.split;
          a.pdl = v.pdl;
          CK(gemv_bf16(a, st));
        } else {
          gemv(v, qkv[l], res, s.qkv(), s.hidden, qkv_out.data(), false, GemvEpilogue::kStore,
               norm1[l].as<Bf16>(), v.next >= 1 ? &o[l] : nullptr, size_t(s.hidden) * s.hidden * 2);
        }
        attention(l, v.rope, v.attn, v.attn_splits, v.attn_warps);
        gemv(v, o[l], attn.as<Bf16>(), s.hidden, s.hidden, res, false, GemvEpilogue::kResidualAdd,
             nullptr, v.next >= 2 ? &gu[l] : nullptr, size_t{16} << 20, v.o_l2 ? 1 : -1);
        gemv(v, gu[l], res, s.inter, s.hidden, act.data(), false, GemvEpilogue::kGatedSilu,
             norm2[l].as<Bf16>());
        gemv(v, down[l], act.as<Bf16>(), s.hidden, s.inter, res, false, GemvEpilogue::kResidualAdd,
             nullptr);
      }
    }
    CK(rmsnorm_residual(v.fused ? nullptr : delta.as<Bf16>(), s.hidden, res, s.hidden,
                        final_norm.as<Bf16>(), 0.0f, 1e-5f, xn.as<Bf16>(), s.hidden, 1, s.hidden,
                        st));
    gemv(v, lm_head, xn.as<Bf16>(), s.vocab, s.hidden, logits.data(), true, GemvEpilogue::kStore,
         nullptr);
  };
  const double weight_bytes =
      2.0 * (s.layers * (double(s.qkv()) * s.hidden + double(s.hidden) * s.hidden +
                         2.0 * s.inter * s.hidden + double(s.hidden) * s.inter) +
             double(s.vocab) * s.hidden);
  const double floor_ms = weight_bytes / copy_bw * 1e3;
  std::printf(
      "decode step 8B bf16 (ctx 128): floor %.3f ms (%.1f tok/s, %.2f GB excl. embedding)\n",
      floor_ms, 1e3 / floor_ms, weight_bytes / 1e9);
  // W3/W4: the qkv->o L2 prefetch and lane L2 prefetch of first rows lost (dropped here).
  // gpu-decode: where the ~20 us a layer outside the GEMVs go (timing-only variants skip a
  // kernel, so their outputs are not checked), and the fixes: RoPE + KV write in the qkv
  // GEMV's epilogue, the attention under PDL (metadata before the wait, early trigger).
  const StepVariant variants[] = {
      {"old gemv_bf16, unfused", true, false, false, 1, 0, 0, 0, 0},
      {"fused + pdl, auto split (src before)", false, true, true, 0, 0, 0, 0, 0, 0, false, 4},
      {"  attention 8 warps a block", false, true, true, 0, 0, 0, 0, 0, 0, false, 8},
      {"  + attention pdl", false, true, true, 0, 0, 0, 0, 1, 0, false, 4},
      {"  + rope in qkv epilogue", false, true, true, 0, 0, 0, 1, 0, 0, false, 4},
      {"  + rope in qkv + attention pdl, 4 warps", false, true, true, 0, 0, 0, 1, 1, 0, false, 4},
      {"  + rope in qkv + attention pdl, 8 warps (src now)", false, true, true, 0, 0, 0, 1, 1},
      {"  rope in qkv at split 2 + attention pdl", false, true, true, 0, 0, 0, 2, 1},
      {"  rope in qkv at split 4 + attention pdl", false, true, true, 0, 0, 0, 3, 1},
      {"  src now, attention 2 splits", false, true, true, 0, 0, 0, 1, 1, 2},

      {"timing: src now, gate/up alternating rows", false, true, true, 0, 0, 0, 1, 1, 0, false, 0,
       1},
      {"timing: src now, gate/up blocks of 16 rows", false, true, true, 0, 0, 0, 1, 1, 0, false, 0,
       16},
      {"timing: src now, gate/up blocks of 1024 rows", false, true, true, 0, 0, 0, 1, 1, 0, false,
       0, 1024},
      {"timing: fused, no rope kernel", false, true, true, 0, 0, 0, -1, 0},
      {"timing: fused, no attention", false, true, true, 0, 0, 0, 0, -1},
      {"timing: fused, no rope, no attention", false, true, true, 0, 0, 0, -1, -1},
      {"timing: rope in qkv, no attention", false, true, true, 0, 0, 0, 1, -1},
  };
  std::vector<float> ref_logits;
  std::vector<uint16_t> ref_resid;
  for (const StepVariant& v : variants) {
    CK(cudaMemcpyAsync(resid.data(), resid0.data(), size_t(s.hidden) * 2, cudaMemcpyDeviceToDevice,
                       st));
    step(v);
    auto lg = lab.download<float>(logits, s.vocab);
    auto rs = lab.download<uint16_t>(resid, s.hidden);
    const char* check_note = "reference";
    if (v.rope < 0 || v.attn < 0 || v.gu_block > 0) {
      check_note = "timing only";
    } else if (ref_logits.empty()) {
      ref_logits = lg;
      ref_resid = rs;
    } else {
      double el = rel_diff_f32(lg, ref_logits);
      double er = rel_diff_bf16(rs, ref_resid);
      bool same = el == 0 && er == 0;
      const double tol = v.split == 1 ? 0.0 : 5e-2;
      if (!(el <= tol && er <= tol)) {
        std::printf("  %-48s FAILED validation: logits rel diff %.3g, residual %.3g\n", v.name, el,
                    er);
        std::fflush(stdout);
        continue;
      }
      check_note = same ? "bit-identical" : "within tolerance";
    }
    double eager = median_ms(
        st, [&](int) { step(v); }, 10, 2);
    double graphed = lab.graph_ms([&] { step(v); }, 30);
    std::printf(
        "  %-48s eager %.3f ms (%.1f tok/s), graph %.3f ms (%.1f tok/s) = %.1f%% of floor  [%s]\n",
        v.name, eager, 1e3 / eager, graphed, 1e3 / graphed, 100 * floor_ms / graphed, check_note);
    std::fflush(stdout);
  }
}

// cuBLASLt bf16 y[m, n] = x[m, k] · w[n, k]^T (f32 accumulate), heuristic's first algorithm:
// what GemmBf16 runs for shapes it does not route to the GEMV.
class Lt {
 public:
  Lt(DeviceContext& ctx, int m, int n, int k) : ctx_(ctx) {
    CK(cublas_status(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublas_status(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "ta"));
    CK(cublas_status(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "tb"));
    CK(cublas_status(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, k, n, k), "a"));
    CK(cublas_status(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, k, m, k), "b"));
    CK(cublas_status(cublasLtMatrixLayoutCreate(&c_, CUDA_R_16BF, n, m, n), "c"));
    cublasLtMatmulPreference_t pref = nullptr;
    CK(cublas_status(cublasLtMatmulPreferenceCreate(&pref), "pref"));
    size_t ws = ctx.workspace_size();
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    cublasLtMatmulHeuristicResult_t h{};
    int found = 0;
    CK(cublas_status(
        cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt(), desc_, a_, b_, c_, c_, pref, 1, &h, &found),
        "heuristic"));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw std::runtime_error("no cuBLASLt algorithm");
    algo_ = h.algo;
  }
  ~Lt() {
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatmulDescDestroy(desc_);
  }
  void run(const Bf16* x, const Bf16* w, Bf16* y) {
    float alpha = 1.0f, beta = 0.0f;
    CK(cublas_status(
        cublasLtMatmul(ctx_.cublaslt(), desc_, &alpha, w, a_, x, b_, &beta, y, c_, y, c_, &algo_,
                       ctx_.workspace(), ctx_.workspace_size(), ctx_.stream()),
        "matmul"));
  }

 private:
  DeviceContext& ctx_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

// The GEMV vs cuBLASLt per 8B layer (qkv + o + gate_up + down, store epilogue, graph-replayed
// chains over rotating copies) at m = 1..4 (+ cuBLASLt at 8): where GemmBf16 should stop
// routing to the GEMV (kGemvRoutedMaxRows).
void rows_sweep(Lab& lab, double copy_bw) {
  const int shapes[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  const int copies = 3;  // 3 x 436 MB of layers rotate past the L2
  std::vector<DeviceBuffer> ws[4];
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < copies; ++i) ws[s].push_back(lab.bf16(size_t(shapes[s][0]) * shapes[s][1]));
  }
  DeviceBuffer x = lab.bf16(size_t(8) * 14336, 1.0f);
  DeviceBuffer y = lab.raw(size_t(8) * 28672 * 2);
  double layer_bytes = 0;
  for (auto& sh : shapes) layer_bytes += 2.0 * sh[0] * sh[1];
  static const char* kNames[4] = {"qkv", "o", "gate_up", "down"};
  for (int m : {1, 2, 3, 4, 8}) {
    // Per shape, chains of one shape (the GEMV where it takes the shape: x must fit 48 KB
    // of shared memory), then summed over the layer.
    double gemv_layer = 0, lt_layer = 0;
    bool gemv_all = true;
    std::printf("  m=%d:", m);
    for (int s = 0; s < 4; ++s) {
      GemvArgs a;
      a.x = x.as<Bf16>();
      a.ldx = shapes[s][1];
      a.ldw = shapes[s][1];
      a.w = ws[s][0].as<Bf16>();
      a.y = y.data();
      a.ldy = shapes[s][0];
      a.m = m;
      a.n = shapes[s][0];
      a.k = shapes[s][1];
      a.sm_count = lab.sms();
      a.pdl = true;
      double gemv_us = -1;
      if (m <= kGemvMaxRows && gemv_bf16_supported(a)) {
        gemv_us = lab.graph_ms([&] {
          for (int i = 0; i < copies; ++i) {
            a.w = ws[s][i].as<Bf16>();
            CK(gemv_bf16(a, lab.st()));
          }
        }) * 1e3 / copies;
        gemv_layer += gemv_us;
      } else {
        gemv_all = false;
      }
      Lt lt(lab.ctx, m, shapes[s][0], shapes[s][1]);
      double lt_us = lab.graph_ms([&] {
        for (int i = 0; i < copies; ++i) {
          lt.run(x.as<Bf16>(), ws[s][i].as<Bf16>(), y.as<Bf16>());
        }
      }) * 1e3 / copies;
      lt_layer += lt_us;
      if (gemv_us >= 0) {
        std::printf("  %s GEMV %.1f / Lt %.1f us", kNames[s], gemv_us, lt_us);
      } else {
        std::printf("  %s GEMV n/a / Lt %.1f us", kNames[s], lt_us);
      }
    }
    std::printf("\n        per layer: cuBLASLt %.1f us (%.0f%% of copy)", lt_layer,
                100 * layer_bytes / (lt_layer * 1e-6) / copy_bw);
    if (gemv_all) {
      std::printf(", GEMV %.1f us -> %s faster (x%.2f)", gemv_layer,
                  gemv_layer < lt_layer ? "GEMV" : "cuBLASLt",
                  std::max(gemv_layer, lt_layer) / std::min(gemv_layer, lt_layer));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

int run() {
  auto ctx = DeviceContext::create({});
  check(ctx.status(), "device");
  Lab lab{**ctx};
  std::printf("device: %s, %d SMs, L2 %.1f MB\n", (*ctx)->properties().name, lab.sms(),
              (*ctx)->properties().l2CacheSize / 1e6);
  const double copy_bw = measure_copy_bandwidth(lab.st());
  std::printf("GEMV shapes, m = 1, graph-replayed chains over rotating weight copies:\n");
  std::fflush(stdout);
  shape_chain(lab, "o", 4096, 4096, GemvEpilogue::kStore, false, copy_bw);
  shape_chain(lab, "qkv", 6144, 4096, GemvEpilogue::kStore, false, copy_bw);
  shape_chain(lab, "gate_up", 28672, 4096, GemvEpilogue::kStore, false, copy_bw);
  shape_chain(lab, "gate+SiLU", 14336, 4096, GemvEpilogue::kGatedSilu, false, copy_bw);
  shape_chain(lab, "down", 4096, 14336, GemvEpilogue::kStore, false, copy_bw);
  shape_chain(lab, "lm_head", 128256, 4096, GemvEpilogue::kStore, true, copy_bw);
  decode_step(lab, copy_bw);
  std::printf("rows sweep (kGemvRoutedMaxRows = %d):\n", kGemvRoutedMaxRows);
  rows_sweep(lab, copy_bw);
  return 0;
}

}  // namespace
}  // namespace hearth::cuda::dev

int main() {
  try {
    return hearth::cuda::dev::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lab failed: %s\n", e.what());
    return 1;
  }
}
