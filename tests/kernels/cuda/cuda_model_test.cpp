// The CUDA llama-family forward against transformers' goldens (tests/fixtures/models, float64
// runs on the same weights) and against the CPU f32 path, through the real loader: logits of
// each prompt, then greedy decoding after a chunked prefill.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>

#include "base/mapped_file.h"
#include "common/batch_invariance_check.h"
#include "common/model_runner.h"
#include "engine/engine.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/gemm_bf16.h"
#include "models/cuda/cuda_llama_model.h"
#include "models/device.h"
#include "models/model.h"
#include "models/quantize.h"
#include "models/safetensors_writer.h"
#include "tensor/dtype.h"

namespace hearth {
namespace {

using nlohmann::json;
const std::string kFixtures = std::string(HEARTH_SOURCE_DIR) + "/tests/fixtures/models";

const json& goldens() {
  static const json g = [] {
    auto text = read_file(kFixtures + "/goldens.json");
    EXPECT_TRUE(text.ok()) << text.status().to_string();
    return json::parse(*text);
  }();
  return g;
}

using Runner = tests::ModelRunner;

// Tolerance: the GPU path keeps every activation in bf16 (8 mantissa bits; ~10 roundings
// per layer) where transformers' goldens are float64 on the same weights, so logits may
// differ by a few bf16 ulps of the activations they sum: 3e-2 of the logit range.
constexpr double kLogitTolerance = 3e-2;

double max_error_over_range(const std::vector<float>& got, const std::vector<double>& want) {
  const auto [mn, mx] = std::minmax_element(want.begin(), want.end());
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
  }
  return worst / (*mx - *mn);
}

class CudaParity : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaParity, LogitsAndGreedyMatchTransformers) {
  const json& g = goldens()["variants"][GetParam()];
  const std::string dir = kFixtures + "/" + g["dir"].get<std::string>();
  auto gpu = load_cuda_model(dir, {});
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto cpu = load_model(dir, LoadOptions{2, KernelKind::kCpu});
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  const json& prompts = goldens()["prompts"];
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    auto ids = prompts[p]["ids"].get<std::vector<int32_t>>();
    Runner gpu_run(**gpu);
    Runner cpu_run(**cpu);
    auto got = gpu_run.prefill(ids, ids.size());
    auto want = g["logits"][p].get<std::vector<double>>();
    EXPECT_LE(max_error_over_range(got, want), kLogitTolerance) << "prompt " << p;
    auto cpu_logits = cpu_run.prefill(ids, ids.size());
    EXPECT_LE(max_error_over_range(got, std::vector<double>(cpu_logits.begin(), cpu_logits.end())),
              kLogitTolerance)
        << "prompt " << p << " vs the CPU f32 path";
  }
  // Greedy after a prefill in chunks of 5, the CPU f32 path in lockstep: tokens identical
  // to transformers' up to the first step whose top-2 margin is within twice the GPU-CPU
  // logit difference of that step (where bf16 may legitimately flip the order).
  const int gp = g["greedy_prompt"].get<int>();
  auto ids = prompts[gp]["ids"].get<std::vector<int32_t>>();
  auto want_tokens = g["greedy_tokens"].get<std::vector<int32_t>>();
  auto margins = g["greedy_margins"].get<std::vector<double>>();
  Runner gpu_run(**gpu);
  Runner cpu_run(**cpu);
  std::vector<float> logits = gpu_run.prefill(ids, 5);
  std::vector<float> cpu_logits = cpu_run.prefill(ids, 5);
  int compared = 0;
  for (std::size_t i = 0; i < want_tokens.size(); ++i) {
    double diff = 0.0;
    for (std::size_t v = 0; v < logits.size(); ++v) {
      diff = std::max(diff, static_cast<double>(std::abs(logits[v] - cpu_logits[v])));
    }
    if (margins[i] <= 2 * diff) break;
    int32_t token =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(token, want_tokens[i]) << "greedy step " << i;
    ++compared;
    logits = gpu_run.step(std::span(&want_tokens[i], 1));
    cpu_logits = cpu_run.step(std::span(&want_tokens[i], 1));
  }
  EXPECT_GE(compared, 1) << "no greedy step had a margin above the bf16 error";
  std::printf("%s: %d of %zu greedy tokens compared\n", GetParam().c_str(), compared,
              want_tokens.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity,
                         ::testing::Values("llama-bf16", "mistral-bf16", "qwen2-bf16", "qwen3-bf16",
                                           "qwen3-mlx"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Decode steps replayed from CUDA graphs give bit-identical logits to eager execution.
TEST(CudaModel, CompiledDecodeIsBitIdenticalToEager) {
  for (const char* variant : {"qwen3-bf16", "qwen3-mlx", "llama-bf16"}) {
    const std::string dir =
        kFixtures + "/" + goldens()["variants"][variant]["dir"].get<std::string>();
    CudaLoadOptions eager_options;
    eager_options.compiled_decode = false;
    auto eager = load_cuda_model(dir, eager_options);
    auto graphed = load_cuda_model(dir, {});
    ASSERT_TRUE(eager.ok() && graphed.ok());
    auto ids = goldens()["prompts"][2]["ids"].get<std::vector<int32_t>>();
    Runner a(**eager);
    Runner b(**graphed);
    std::vector<float> la = a.prefill(ids, ids.size());
    std::vector<float> lb = b.prefill(ids, ids.size());
    for (int step = 0; step < 12; ++step) {  // crosses block and table-stride boundaries
      ASSERT_EQ(la, lb) << variant << " step " << step;
      int32_t next = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
      la = a.step(std::span(&next, 1));
      lb = b.step(std::span(&next, 1));
    }
  }
}

// gate_up uploaded in blocks of b gate rows then their b up rows (CudaLoadOptions::
// gate_up_block) changes the layout only: prefill (batched GEMM + the SiLU gate over
// [b gate | b up] rows) and decode steps (the fused GEMV pairing the blocked rows) give the
// logits of the stacked layout (bit-identical where the GEMMs' per-column sums keep their
// order; held to 1e-3 of the logit range).
TEST(CudaModel, BlockedGateUpGivesTheSameLogits) {
  const std::string dir =
      kFixtures + "/" + goldens()["variants"]["llama-bf16"]["dir"].get<std::string>();
  auto base = load_cuda_model(dir, {});
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  auto ids = goldens()["prompts"][2]["ids"].get<std::vector<int32_t>>();
  for (int block : {1, 16}) {
    CudaLoadOptions options;
    options.gate_up_block = block;
    auto blocked = load_cuda_model(dir, options);
    ASSERT_TRUE(blocked.ok()) << blocked.status().to_string();
    Runner a(**base);
    Runner b(**blocked);
    std::vector<float> la = a.prefill(ids, ids.size());
    std::vector<float> lb = b.prefill(ids, ids.size());
    for (int step = 0; step < 6; ++step) {
      ASSERT_EQ(la.size(), lb.size());
      std::vector<double> want(la.begin(), la.end());
      EXPECT_LE(max_error_over_range(lb, want), 1e-3) << "block " << block << " step " << step;
      int32_t next = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
      la = a.step(std::span(&next, 1));
      lb = b.step(std::span(&next, 1));
    }
  }
}

// Model::warm_up runs every GEMM shape (a quantized one on a stand-in of its dequantized
// copy) at a ladder of row counts (up to 300 tokens, 8 logit rows) before any step; the
// plans it caches are the ones a cold model makes on first use, so a prompt's logits and the
// decode steps after it are the same bits, and a warm-up of zero tokens is a no-op.
TEST(CudaModel, WarmUpKeepsTheBitsOfAColdModel) {
  for (const char* variant : {"llama-bf16", "qwen3-mlx"}) {
    SCOPED_TRACE(variant);
    const std::string dir =
        kFixtures + "/" + goldens()["variants"][variant]["dir"].get<std::string>();
    auto cold = load_cuda_model(dir, {});
    ASSERT_TRUE(cold.ok()) << cold.status().to_string();
    auto warm = load_cuda_model(dir, {});
    ASSERT_TRUE(warm.ok()) << warm.status().to_string();
    ASSERT_TRUE((*warm)->warm_up(0, 0).ok());
    Status warmed = (*warm)->warm_up(300, 8);
    ASSERT_TRUE(warmed.ok()) << warmed.to_string();
    auto ids = goldens()["prompts"][2]["ids"].get<std::vector<int32_t>>();
    Runner a(**cold);
    Runner b(**warm);
    std::vector<float> la = a.prefill(ids, ids.size());
    std::vector<float> lb = b.prefill(ids, ids.size());
    for (int step = 0; step < 6; ++step) {
      ASSERT_EQ(la, lb) << "step " << step;
      int32_t next = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
      la = a.step(std::span(&next, 1));
      lb = b.step(std::span(&next, 1));
    }
  }
}

// Decode-only steps of many rows (over kMaxGraphTokens) are captured once their shape
// repeats and replayed; every step's logits equal eager execution's bit for bit, while the
// rows' contexts grow across block and table-stride boundaries and the batch shrinks.
TEST(CudaModel, BatchedDecodeGraphsAreBitIdenticalToEager) {
  for (const char* variant : {"qwen3-bf16", "qwen3-mlx"}) {
    const std::string dir =
        kFixtures + "/" + goldens()["variants"][variant]["dir"].get<std::string>();
    CudaLoadOptions eager_options;
    eager_options.compiled_decode = false;
    auto eager = load_cuda_model(dir, eager_options);
    auto graphed = load_cuda_model(dir, {});
    ASSERT_TRUE(eager.ok() && graphed.ok());
    constexpr int kSeqs = 19;  // > kMaxGraphTokens and > the affine GEMV's rows
    constexpr int kBlock = 4;
    constexpr int kBlocksPerSeq = 12;
    for (Model* m : {eager->get(), graphed->get()}) {
      ASSERT_TRUE(m->create_kv_cache(kSeqs * kBlocksPerSeq, kBlock).ok());
    }
    const int vocab = (*eager)->config().vocab_size;
    std::vector<std::vector<int32_t>> tables(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {  // interleaved, so no sequence's blocks are contiguous
      for (int b = 0; b < kBlocksPerSeq; ++b) tables[s].push_back(b * kSeqs + s);
    }
    // Prefill: sequence s gets a prompt of 3 + s % 5 tokens (one step, all sequences).
    auto prompt = goldens()["prompts"][2]["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> lens(kSeqs), tokens, positions, rows;
    std::vector<SequenceSlice> seqs;
    for (int s = 0; s < kSeqs; ++s) {
      lens[s] = 3 + s % 5;
      seqs.push_back({static_cast<int32_t>(tokens.size()), lens[s], 0, tables[s]});
      for (int t = 0; t < lens[s]; ++t) {
        tokens.push_back(prompt[(s + t) % prompt.size()]);
        positions.push_back(t);
      }
      rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    auto run = [&](Model& m) {
      std::vector<float> logits(rows.size() * vocab);
      Status st = m.forward(ForwardBatch{tokens, positions, seqs, rows}, logits);
      EXPECT_TRUE(st.ok()) << st.to_string();
      return logits;
    };
    std::vector<float> la = run(**eager), lb = run(**graphed);
    ASSERT_EQ(la, lb) << variant << " prefill";
    int live = kSeqs;
    for (int step = 0; step < 30; ++step) {
      if (step == 20) live = kSeqs - 6;  // the batch shrinks: a new shape, captured again
      std::vector<int32_t> next(live);
      for (int s = 0; s < live; ++s) {
        auto row = la.begin() + std::ptrdiff_t(s) * vocab;
        next[s] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      }
      tokens.clear(), positions.clear(), rows.clear(), seqs.clear();
      for (int s = 0; s < live; ++s) {
        seqs.push_back({s, 1, lens[s], tables[s]});
        tokens.push_back(next[s]);
        positions.push_back(lens[s]);
        rows.push_back(s);
        ++lens[s];
      }
      la = run(**eager);
      lb = run(**graphed);
      ASSERT_EQ(la, lb) << variant << " decode step " << step;
    }
  }
}

// DeviceContext::upload: many jobs of odd sizes, chunks smaller than most jobs, several
// threads; every byte lands where its job says (each chunk's DMA reads its staging buffer
// before that buffer is refilled).
TEST(CudaModel, ParallelUploadCopiesEveryByte) {
  auto ctx = cuda::DeviceContext::create({});
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  std::vector<std::size_t> sizes = {1, 4095, 4096, 4097, 100000, 1 << 20, (3 << 20) + 17, 7, 65536};
  std::size_t total = 0;
  for (std::size_t n : sizes) total += n;
  std::vector<uint8_t> host(total);
  for (std::size_t i = 0; i < total; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  auto dev = (*ctx)->allocate(total, "upload test");
  ASSERT_TRUE(dev.ok());
  // Jobs in reverse order of their destinations, so a chunk mix-up cannot go unnoticed.
  std::vector<cuda::UploadJob> jobs;
  std::size_t off = 0;
  for (std::size_t n : sizes) {
    jobs.push_back({static_cast<char*>(dev->data()) + off, host.data() + off, n});
    off += n;
  }
  std::reverse(jobs.begin(), jobs.end());
  for (int threads : {1, 3, 8}) {
    ASSERT_EQ(cudaMemset(dev->data(), 0, total), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the upload's streams do not wait for it
    cuda::UploadOptions options;
    options.threads = threads;
    options.chunk_bytes = 64 << 10;
    std::atomic<std::size_t> reported{0};
    options.progress = [&](std::size_t done, std::size_t all) {
      EXPECT_EQ(all, total);
      std::size_t seen = reported.load();
      while (done > seen && !reported.compare_exchange_weak(seen, done)) {
      }
    };
    Status st = (*ctx)->upload(jobs, options);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(reported.load(), total);
    std::vector<uint8_t> back(total);
    ASSERT_EQ(cudaMemcpy(back.data(), dev->data(), total, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(back, host) << threads << " threads";
  }
}

// GemmBf16 through cuBLASLt at a batched-decode shape (m = 48 rows): x · wᵀ checked in
// double (bf16 output, f32 accumulation over k = 2048 terms: 1e-2 relative to the row's
// magnitude), repeat calls bit-identical, and a graph capture of the shape replays the same
// result (what batched decode graphs rely on).
TEST(CudaModel, BatchedGemmIsCorrectAndReplaysIdentically) {
  auto ctx = cuda::DeviceContext::create({});
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  cuda::GemmBf16 gemm(**ctx);
  const int m = 48, n = 4096, k = 2048;
  std::vector<uint16_t> hx(std::size_t(m) * k), hw(std::size_t(n) * k);
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) & 0xFFFF) / 65536.0f - 0.5f;
  };
  for (auto& v : hx) v = f32_to_bf16(next());
  for (auto& v : hw) v = f32_to_bf16(next() * 0.1f);
  auto dx = (*ctx)->allocate(hx.size() * 2, "x");
  auto dw = (*ctx)->allocate(hw.size() * 2, "w");
  auto dy = (*ctx)->allocate(std::size_t(m) * n * 2, "y");
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
  ASSERT_EQ(cudaMemcpy(dx->data(), hx.data(), hx.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dw->data(), hw.data(), hw.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the context's stream does not wait for it
  cuda::GemmShape g{m, n, k, k, k, n, cuda::GemmOut::kBf16, false};
  auto run = [&] {
    Status st = gemm.run(g, dx->as<__nv_bfloat16>(), dw->as<__nv_bfloat16>(), dy->data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE((*ctx)->synchronize().ok());
    std::vector<uint16_t> y(std::size_t(m) * n);
    EXPECT_EQ(cudaMemcpy(y.data(), dy->data(), y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  };
  std::vector<uint16_t> first = run();
  for (int r = 0; r < m; r += 7) {
    for (int c = 0; c < n; c += 331) {
      double want = 0, scale = 0;
      for (int i = 0; i < k; ++i) {
        const double p = double(bf16_to_f32(hx[std::size_t(r) * k + i])) *
                         bf16_to_f32(hw[std::size_t(c) * k + i]);
        want += p;
        scale += std::abs(p);
      }
      ASSERT_NEAR(bf16_to_f32(first[std::size_t(r) * n + c]), want, 1e-2 * scale) << r << "," << c;
    }
  }
  EXPECT_EQ(run(), first);
  cudaStream_t st = (*ctx)->stream();
  ASSERT_EQ(cudaMemsetAsync(dy->data(), 0, std::size_t(m) * n * 2, st), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Status captured = gemm.run(g, dx->as<__nv_bfloat16>(), dw->as<__nv_bfloat16>(), dy->data());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
  ASSERT_TRUE((*ctx)->synchronize().ok());
  std::vector<uint16_t> replayed(std::size_t(m) * n);
  ASSERT_EQ(cudaMemcpy(replayed.data(), dy->data(), replayed.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(replayed, first);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// GemmBf16's batch-invariant form: every row of y is the same bits whatever the call's m and
// wherever the row sits in it (computed in one call of 300 rows, shifted by 5 rows, alone, in
// a call of exactly one block, and in calls of 2, 7, 128 and 200 rows), for a shape cuBLASLt
// splits k on at 64 rows and an f32-output one; and it is x · wᵀ (checked against the default
// route within bf16 rounding). Every form of GemmBf16Options::InvariantForm.
TEST(CudaModel, BatchInvariantGemmRowsDoNotDependOnTheCall) {
  auto ctx = cuda::DeviceContext::create({});
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  cuda::GemmBf16 reference(**ctx, cuda::GemmBf16Options{});
  using Form = cuda::GemmBf16Options::InvariantForm;
  for (const Form form : {Form::kUnsplit, Form::kBatched, Form::kSingle}) {
    SCOPED_TRACE(form == Form::kUnsplit   ? "each row count its own unsplit algorithm"
                 : form == Form::kBatched ? "blocks as one strided batch"
                                          : "one call over every block's rows");
    cuda::GemmBf16Options invariant_options;
    invariant_options.batch_invariant = true;
    invariant_options.invariant_form = form;
    cuda::GemmBf16 invariant(**ctx, invariant_options);
    constexpr int kRows = 300, kPadded = 384;  // room for a 5-row shift plus a whole last block
    struct Case {
      int n, k;
      cuda::GemmOut out;
    };
    for (const Case& cs :
         {Case{4096, 14336, cuda::GemmOut::kBf16}, Case{1000, 512, cuda::GemmOut::kF32},
          Case{6144, 4096, cuda::GemmOut::kBf16}}) {
      SCOPED_TRACE(::testing::Message() << "n=" << cs.n << " k=" << cs.k);
      const std::size_t y_size = cs.out == cuda::GemmOut::kF32 ? 4 : 2;
      std::vector<uint16_t> hx(std::size_t(kPadded) * cs.k), hw(std::size_t(cs.n) * cs.k);
      std::mt19937 rng(cs.n + cs.k);
      std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
      for (auto& v : hx) v = f32_to_bf16(dist(rng));
      for (auto& v : hw) v = f32_to_bf16(dist(rng) * 0.1f);
      auto dx = (*ctx)->allocate(hx.size() * 2, "x");
      auto dw = (*ctx)->allocate(hw.size() * 2, "w");
      auto dy = (*ctx)->allocate(std::size_t(kPadded) * cs.n * y_size, "y");
      ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
      ASSERT_EQ(cudaMemcpy(dx->data(), hx.data(), hx.size() * 2, cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dw->data(), hw.data(), hw.size() * 2, cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::size_t row_bytes = std::size_t(cs.n) * y_size;
      // Rows [first, first + m) of x through `gemm`, as bytes of y's rows.
      auto run = [&](cuda::GemmBf16& gemm, int first, int m) {
        cuda::GemmShape g{m, cs.n, cs.k, cs.k, cs.k, cs.n, cs.out, false};
        Status st = gemm.run(g, dx->as<__nv_bfloat16>() + std::size_t(first) * cs.k,
                             dw->as<__nv_bfloat16>(), dy->as<char>() + first * row_bytes);
        EXPECT_TRUE(st.ok()) << st.to_string();
        EXPECT_TRUE((*ctx)->synchronize().ok());
        std::vector<char> y(std::size_t(m) * row_bytes);
        EXPECT_EQ(cudaMemcpy(y.data(), dy->as<char>() + first * row_bytes, y.size(),
                             cudaMemcpyDeviceToHost),
                  cudaSuccess);
        return y;
      };
      const std::vector<char> whole = run(invariant, 0, kRows);
      auto row = [&](const std::vector<char>& y, int r) {
        return std::vector<char>(y.begin() + r * row_bytes, y.begin() + (r + 1) * row_bytes);
      };
      const std::vector<char> shifted = run(invariant, 5, kRows - 5);
      for (int r = 5; r < kRows; ++r) ASSERT_EQ(row(shifted, r - 5), row(whole, r)) << "row " << r;
      for (int r : {0, 77, 299}) ASSERT_EQ(run(invariant, r, 1), row(whole, r)) << "row " << r;
      const std::vector<char> block = run(invariant, 64, cuda::kInvariantRows);
      for (int r = 0; r < cuda::kInvariantRows; ++r) ASSERT_EQ(row(block, r), row(whole, 64 + r));
      for (int m : {2, 7, 128, 200}) {  // more row counts, each its own plan under kUnsplit
        const std::vector<char> part = run(invariant, 40, m);
        for (int r = 0; r < m; ++r) ASSERT_EQ(row(part, r), row(whole, 40 + r)) << "m=" << m;
      }
      // The same products as the default route: within a few bf16 roundings of the output.
      const std::vector<char> ref = run(reference, 0, kRows);
      auto value = [&](const std::vector<char>& y, std::size_t i) {
        if (cs.out == cuda::GemmOut::kF32) {
          float f;
          std::memcpy(&f, y.data() + i * 4, 4);
          return f;
        }
        uint16_t b;
        std::memcpy(&b, y.data() + i * 2, 2);
        return bf16_to_f32(b);
      };
      for (std::size_t i = 0; i < std::size_t(kRows) * cs.n; i += 97) {
        const float want = value(ref, i);
        ASSERT_NEAR(value(whole, i), want, 2e-2f * std::abs(want) + 1e-3f) << i;
      }
    }
  }
}

// Two sequences in one step (a chunked prefill and a decode row) give the same logits as
// each run alone (same kernels, same data: only the attention split may differ).
TEST(CudaModel, MixedBatchEqualsSeparateRuns) {
  const json& g = goldens()["variants"]["qwen3-bf16"];
  auto model = load_cuda_model(kFixtures + "/" + g["dir"].get<std::string>(), {});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& m = **model;
  ASSERT_TRUE(m.create_kv_cache(64, 4).ok());
  auto a = goldens()["prompts"][0]["ids"].get<std::vector<int32_t>>();
  auto b = goldens()["prompts"][1]["ids"].get<std::vector<int32_t>>();
  const int vocab = m.config().vocab_size;
  std::vector<int32_t> table_a = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  std::vector<int32_t> table_b = {31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16};
  auto run = [&](std::vector<SequenceSlice> seqs, std::vector<int32_t> tokens,
                 std::vector<int32_t> positions, std::vector<int32_t> rows) {
    std::vector<float> logits(rows.size() * vocab);
    ForwardBatch batch{tokens, positions, seqs, rows};
    Status st = m.forward(batch, logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return logits;
  };
  // Sequence a: all but its last token cached; b: prefilled in this step.
  std::vector<int32_t> a_head(a.begin(), a.end() - 1);
  std::vector<int32_t> pos_a(a_head.size());
  std::iota(pos_a.begin(), pos_a.end(), 0);
  run({{0, static_cast<int32_t>(a_head.size()), 0, table_a}}, a_head, pos_a, {0});
  std::vector<int32_t> pos_b(b.size());
  std::iota(pos_b.begin(), pos_b.end(), 0);
  // b first in the batch, then a's decode row; slices listed out of token order.
  std::vector<int32_t> tokens = b;
  tokens.push_back(a.back());
  std::vector<int32_t> positions = pos_b;
  positions.push_back(static_cast<int32_t>(a_head.size()));
  const int32_t nb = static_cast<int32_t>(b.size());
  auto mixed = run({{nb, 1, static_cast<int32_t>(a_head.size()), table_a}, {0, nb, 0, table_b}},
                   tokens, positions, {nb, nb - 1});
  // Alone: a's decode row again into the same slot, b prefilled into fresh blocks.
  auto alone_a = run({{0, 1, static_cast<int32_t>(a_head.size()), table_a}}, {a.back()},
                     {static_cast<int32_t>(a_head.size())}, {0});
  auto alone_b = run({{0, nb, 0, table_b}}, b, pos_b, {nb - 1});
  for (int i = 0; i < vocab; ++i) {
    ASSERT_NEAR(mixed[i], alone_a[i], 1e-2) << i;
    ASSERT_NEAR(mixed[vocab + i], alone_b[i], 1e-2) << i;
  }
  // Bad input is an error, not a crash.
  std::vector<float> one(vocab);
  std::vector<int32_t> bad_token = {vocab + 5};
  std::vector<int32_t> zero = {0};
  std::vector<SequenceSlice> s = {{0, 1, 0, table_a}};
  EXPECT_FALSE(m.forward(ForwardBatch{bad_token, zero, s, zero}, one).ok());
}

// --batch-invariant on the CUDA backend (bf16 models): each prompt's last-row logits are the
// same bits prefilled alone in one step, in chunks of 5 tokens, and in one step with the
// other prompts (4-74 tokens: decode-kernel rows and what the tiled path would take); a decode
// row is the same bits alone and beside a 74-token prefill.
TEST(CudaModel, BatchInvariantLogitsAreBitIdentical) {
  std::vector<std::vector<int32_t>> prompts;
  for (const json& p : goldens()["prompts"])
    prompts.push_back(p["ids"].get<std::vector<int32_t>>());
  for (const char* variant : {"llama-bf16", "qwen3-bf16"}) {
    SCOPED_TRACE(variant);
    const json& g = goldens()["variants"][variant];
    CudaLoadOptions options;
    options.batch_invariant = true;
    auto model = load_cuda_model(kFixtures + "/" + g["dir"].get<std::string>(), options);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_NE((*model)->describe().find("batch-invariant"), std::string::npos)
        << (*model)->describe();
    tests::expect_batch_invariant_logits(**model, prompts);
  }
}

// forward_sample: greedy ids equal argmax of forward()'s logits at every step (same kernels,
// same logits); on_host rows return exactly forward()'s logits; a seeded draw is a function
// of (seed, step) alone.
TEST(CudaModel, ForwardSampleMatchesForwardArgmax) {
  const json& g = goldens()["variants"]["llama-bf16"];
  const std::string dir = kFixtures + "/" + g["dir"].get<std::string>();
  auto a = load_cuda_model(dir, {});
  auto b = load_cuda_model(dir, {});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->samples_on_device());
  const int vocab = (*a)->config().vocab_size;
  ASSERT_TRUE((*a)->create_kv_cache(64, 4).ok());
  ASSERT_TRUE((*b)->create_kv_cache(64, 4).ok());
  std::vector<int32_t> table(64);
  std::iota(table.begin(), table.end(), 0);
  auto ids = goldens()["prompts"][2]["ids"].get<std::vector<int32_t>>();
  int32_t cached = 0;
  std::vector<int32_t> step_tokens = ids;
  RowSampling greedy;
  for (int step = 0; step < 10; ++step) {
    std::vector<int32_t> positions(step_tokens.size());
    std::iota(positions.begin(), positions.end(), cached);
    SequenceSlice s{0, static_cast<int32_t>(step_tokens.size()), cached, table};
    int32_t last = static_cast<int32_t>(step_tokens.size()) - 1;
    ForwardBatch batch{step_tokens, positions, {&s, 1}, {&last, 1}};
    std::vector<float> logits(vocab);
    ASSERT_TRUE((*a)->forward(batch, logits).ok());
    int32_t want =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    int32_t got = -1;
    // Step 3 asks for the row on the host instead: its logits must be forward()'s.
    if (step == 3) {
      RowSampling host;
      host.on_host = true;
      std::vector<float> host_logits(vocab);
      ASSERT_TRUE((*b)->forward_sample(batch, {&host, 1}, {&got, 1}, host_logits).ok());
      ASSERT_EQ(host_logits, logits);
      got = want;
    } else {
      Status st = (*b)->forward_sample(batch, {&greedy, 1}, {&got, 1}, {});
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    ASSERT_EQ(got, want) << "step " << step;
    cached += static_cast<int32_t>(step_tokens.size());
    step_tokens = {got};
  }
  // Mismatched spans are errors.
  int32_t one = 0;
  std::vector<int32_t> tok = {1}, pos = {0};
  SequenceSlice s{0, 1, 0, table};
  ForwardBatch batch{tok, pos, {&s, 1}, {&one, 1}};
  // Seeded draws between greedy steps: the sampler skips the parameter upload when a call's
  // image equals the last one's, so every switch must upload again (same draw for the same
  // seed and step, argmax for greedy).
  {
    std::vector<float> logits(vocab);
    ASSERT_TRUE((*a)->forward(batch, logits).ok());
    const auto argmax =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    auto draw = [&](const RowSampling& r) {
      int32_t id = -1;
      Status st = (*b)->forward_sample(batch, {&r, 1}, {&id, 1}, {});
      EXPECT_TRUE(st.ok()) << st.to_string();
      return id;
    };
    // The argmax biased away, so a seeded draw served the greedy row's parameters would show.
    const std::pair<int32_t, float> away{argmax, -1e30f};
    RowSampling seeded;
    seeded.temperature = 1.0f;
    seeded.seed = 7;
    seeded.step = 3;
    seeded.logit_bias = {&away, 1};
    const int32_t first = draw(seeded);
    ASSERT_NE(first, argmax);
    ASSERT_GE(first, 0);
    EXPECT_EQ(draw(greedy), argmax);
    EXPECT_EQ(draw(greedy), argmax);
    EXPECT_EQ(draw(seeded), first);
    EXPECT_EQ(draw(seeded), first);
    EXPECT_EQ(draw(greedy), argmax);
    EXPECT_EQ(draw(seeded), first);
  }
  EXPECT_FALSE((*b)->forward_sample(batch, {}, {}, {}).ok());
  RowSampling host;
  host.on_host = true;
  EXPECT_FALSE((*b)->forward_sample(batch, {&host, 1}, {&one, 1}, {}).ok());
  // The model reports its device memory for KV sizing.
  auto mem = (*b)->device_memory();
  ASSERT_TRUE(mem.has_value());
  EXPECT_GT(mem->total_bytes, mem->free_bytes);
  EXPECT_GE(mem->peak_bytes, mem->used_bytes);
  EXPECT_GT(mem->used_bytes, (*b)->weight_bytes() / 2);
}

// The engine on the CUDA model samples on the device; greedy output equals the forward +
// host argmax loop token for token (requests run one at a time, as the loop does, so the
// same kernels see the same shapes).
TEST(CudaModel, EngineGreedyOnDeviceEqualsHostArgmax) {
  const json& g = goldens()["variants"]["qwen3-bf16"];
  const std::string dir = kFixtures + "/" + g["dir"].get<std::string>();
  LoadOptions options;
  options.device = Device::kCuda;
  auto reference = load_model(dir, options);
  auto served = load_model(dir, options);
  ASSERT_TRUE(reference.ok() && served.ok()) << reference.status().to_string();
  constexpr int kTokens = 12;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> want;
  for (int p = 0; p < 3; ++p) {
    prompts.push_back(goldens()["prompts"][p]["ids"].get<std::vector<int32_t>>());
    Runner r(**reference);
    std::vector<float> logits = r.prefill(prompts.back(), prompts.back().size());
    std::vector<int32_t> out;
    for (int t = 0; t < kTokens; ++t) {
      int32_t next =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.push_back(next);
      logits = r.step(std::span(&next, 1));
    }
    want.push_back(out);
  }
  engine::EngineOptions eo;
  eo.max_batch = 1;
  eo.block_size = 4;
  eo.num_blocks = 64;
  auto engine = engine::Engine::create(std::move(*served), eo);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  struct Collect : engine::RequestSink {
    std::mutex mutex;
    std::condition_variable done_cv;
    std::vector<int32_t> tokens;
    bool done = false;
    void on_tokens(std::span<const int32_t> t, std::span<const engine::TokenLogprobs>) override {
      std::lock_guard lock(mutex);
      tokens.insert(tokens.end(), t.begin(), t.end());
    }
    void on_finish(const engine::FinishInfo&) override {
      std::lock_guard lock(mutex);
      done = true;
      done_cv.notify_all();
    }
  };
  std::vector<std::shared_ptr<Collect>> sinks;
  engine::SamplingParams params;
  params.temperature = 0;
  params.ignore_eos = true;
  params.max_tokens = kTokens;
  for (const auto& prompt : prompts) {
    sinks.push_back(std::make_shared<Collect>());
    ASSERT_TRUE((*engine)->submit(prompt, params, sinks.back()).ok());
  }
  for (std::size_t i = 0; i < sinks.size(); ++i) {
    std::unique_lock lock(sinks[i]->mutex);
    sinks[i]->done_cv.wait(lock, [&] { return sinks[i]->done; });
    EXPECT_EQ(sinks[i]->tokens, want[i]) << "prompt " << i;
  }
  (*engine)->shutdown();
}

// Quantized models (MLX affine 4-bit, groups of 64, hearth's quantizer; bf16 scales as
// mlx-community models ship them, so the CPU and the GPU dequantize the same values) on the
// fused decode path: the llama fixture (hidden 64, intermediate 128: k % 256 != 0, the
// register kernel) and a random-init llama written here whose every projection has
// k % 256 == 0 (the tensor-core kernel, RoPE + KV write in the qkv GEMV's epilogue).

// hidden 256, 4 heads of 64 (2 KV heads), intermediate 512, 2 layers, vocab 320, tied
// embeddings, f32; norm weights 1 + noise so the GEMVs' norm prologues have weights to get
// wrong.
void write_wide_llama(const std::string& dir) {
  std::filesystem::create_directories(dir);
  constexpr int64_t kHidden = 256, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kInter = 512,
                    kVocab = 320, kLayers = 2;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, Shape shape, float mean, float stddev) {
    TensorToWrite t;
    t.name = name;
    t.dtype = DType::kF32;
    t.shape = shape;
    std::vector<float> v(static_cast<std::size_t>(shape.numel()));
    for (float& x : v) x = mean + stddev * normal(rng);
    t.bytes.resize(v.size() * 4);
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    tensors.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", {kVocab, kHidden}, 0.0f, 0.05f);
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kHidden}, 1.0f, 0.1f);
    add(p + "post_attention_layernorm.weight", {kHidden}, 1.0f, 0.1f);
    add(p + "self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden}, 0.0f, 0.05f);
    add(p + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden}, 0.0f, 0.05f);
    add(p + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden}, 0.0f, 0.05f);
    add(p + "self_attn.o_proj.weight", {kHidden, kHeads * kHeadDim}, 0.0f, 0.05f);
    add(p + "mlp.gate_proj.weight", {kInter, kHidden}, 0.0f, 0.05f);
    add(p + "mlp.up_proj.weight", {kInter, kHidden}, 0.0f, 0.05f);
    add(p + "mlp.down_proj.weight", {kHidden, kInter}, 0.0f, 0.05f);
  }
  add("model.norm.weight", {kHidden}, 1.0f, 0.1f);
  Status st = write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  ASSERT_TRUE(st.ok()) << st.to_string();
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
                 {"vocab_size", kVocab},
                 {"hidden_size", kHidden},
                 {"intermediate_size", kInter},
                 {"num_hidden_layers", kLayers},
                 {"num_attention_heads", kHeads},
                 {"num_key_value_heads", kKvHeads},
                 {"head_dim", kHeadDim},
                 {"hidden_act", "silu"},
                 {"max_position_embeddings", 4096},
                 {"rms_norm_eps", 1e-5},
                 {"rope_theta", 10000.0},
                 {"tie_word_embeddings", true},
                 {"attention_bias", false},
                 {"mlp_bias", false},
                 {"torch_dtype", "float32"},
                 {"bos_token_id", 1},
                 {"eos_token_id", 2}};
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
}

// The two quantized model directories (made once per test run, under the build dir).
const std::vector<std::string>& quantized_models() {
  static const std::vector<std::string> dirs = [] {
    const std::string root = std::string(HEARTH_BINARY_DIR) + "/fixtures/cuda-quantized";
    const std::string wide = root + "/wide-f32";
    write_wide_llama(wide);
    std::vector<std::string> out;
    for (const auto& [src, name] :
         {std::pair{kFixtures + "/llama-f32", "llama-q4g64"}, std::pair{wide, "wide-q4g64"}}) {
      const std::string dst = root + "/" + name;
      Status st = quantize_model_dir(src, dst, QuantSpec{4, 64}, DType::kBF16);
      EXPECT_TRUE(st.ok()) << st.to_string();
      out.push_back(dst);
    }
    return out;
  }();
  return dirs;
}

// Sets an environment variable for the enclosing scope (HEARTH_AFFINE_GEMV is read at load).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// The fused decode path (every step of <= 4 tokens: the prompts' chunks of 3, then decode
// steps) against the CPU path of the same quantized model. Tolerance kLogitTolerance (3e-2
// of the logit range), the dense GPU-CPU budget: both dequantize the same values, the CPU
// keeps f32 activations where the GPU rounds every activation to bf16 (and the register
// kernel x to half per 8 values, ~5e-4 relative). Greedy tokens (the CPU's, teacher-forced
// on both) must agree at every step whose CPU top-2 margin exceeds twice the step's largest
// logit difference.
TEST(CudaQuantized, FusedDecodeMatchesTheCpuPath) {
  for (const std::string& dir : quantized_models()) {
    auto gpu = load_cuda_model(dir, {});
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    EXPECT_EQ((*gpu)->describe().find("unfused"), std::string::npos) << (*gpu)->describe();
    auto cpu = load_model(dir, LoadOptions{2, KernelKind::kCpu});
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    const json& prompts = goldens()["prompts"];
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      auto ids = prompts[p]["ids"].get<std::vector<int32_t>>();
      Runner gpu_run(**gpu);
      Runner cpu_run(**cpu);
      auto got = gpu_run.prefill(ids, 3);
      auto want = cpu_run.prefill(ids, 3);
      EXPECT_LE(max_error_over_range(got, std::vector<double>(want.begin(), want.end())),
                kLogitTolerance)
          << dir << " prompt " << p;
    }
    auto ids = prompts[2]["ids"].get<std::vector<int32_t>>();
    Runner gpu_run(**gpu);
    Runner cpu_run(**cpu);
    std::vector<float> logits = gpu_run.prefill(ids, 3);
    std::vector<float> cpu_logits = cpu_run.prefill(ids, 3);
    int compared = 0;
    for (int step = 0; step < 16; ++step) {
      std::vector<double> want(cpu_logits.begin(), cpu_logits.end());
      EXPECT_LE(max_error_over_range(logits, want), kLogitTolerance) << dir << " step " << step;
      double diff = 0.0;
      for (std::size_t v = 0; v < logits.size(); ++v) {
        diff = std::max(diff, std::abs(logits[v] - want[v]));
      }
      std::vector<double> top = want;
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<>());
      const int32_t next = static_cast<int32_t>(
          std::max_element(cpu_logits.begin(), cpu_logits.end()) - cpu_logits.begin());
      if (top[0] - top[1] > 2 * diff) {
        const int32_t token =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        EXPECT_EQ(token, next) << dir << " greedy step " << step;
        ++compared;
      }
      logits = gpu_run.step(std::span(&next, 1));
      cpu_logits = cpu_run.step(std::span(&next, 1));
    }
    EXPECT_GE(compared, 1) << dir << ": no greedy step had a margin above the bf16 error";
    std::printf("%s: %d of 16 greedy tokens compared\n", dir.c_str(), compared);
  }
}

// Decode steps replayed from CUDA graphs give bit-identical logits to eager execution, on
// the fused path (default) and on the unfused one (HEARTH_AFFINE_GEMV=register); the
// prompt goes in chunks of 3 (captured, fused steps of 3 rows).
TEST(CudaQuantized, CompiledDecodeIsBitIdenticalToEager) {
  for (const char* kernel : {"auto", "register"}) {
    for (const std::string& dir : quantized_models()) {
      ScopedEnv env("HEARTH_AFFINE_GEMV", kernel);
      CudaLoadOptions eager_options;
      eager_options.compiled_decode = false;
      auto eager = load_cuda_model(dir, eager_options);
      auto graphed = load_cuda_model(dir, {});
      ASSERT_TRUE(eager.ok() && graphed.ok());
      auto ids = goldens()["prompts"][2]["ids"].get<std::vector<int32_t>>();
      Runner a(**eager);
      Runner b(**graphed);
      std::vector<float> la = a.prefill(ids, 3);
      std::vector<float> lb = b.prefill(ids, 3);
      for (int step = 0; step < 12; ++step) {
        ASSERT_EQ(la, lb) << dir << " " << kernel << " step " << step;
        int32_t next = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
        la = a.step(std::span(&next, 1));
        lb = b.step(std::span(&next, 1));
      }
    }
  }
}

// HEARTH_AFFINE_GEMV=register (the HFMA2 kernel, unfused 9-kernel layer: the A/B baseline)
// gives the default path's logits within 1e-2 of their range: the fused kernels round as the
// unfused ones do, and the tensor-core kernel (exact bf16 x) differs from the register
// kernel (x rounded to half per 8 values) by ~5e-4 relative per GEMV, an occasional bf16 ulp
// of an activation. An unknown value loads the default path (with a warning).
TEST(CudaQuantized, RegisterKernelMatchesTheDefaultPath) {
  for (const std::string& dir : quantized_models()) {
    auto fused = load_cuda_model(dir, {});
    ASSERT_TRUE(fused.ok()) << fused.status().to_string();
    Result<std::unique_ptr<Model>> reg = [&] {
      ScopedEnv env("HEARTH_AFFINE_GEMV", "register");
      return load_cuda_model(dir, {});
    }();
    ASSERT_TRUE(reg.ok()) << reg.status().to_string();
    EXPECT_NE((*reg)->describe().find("unfused"), std::string::npos) << (*reg)->describe();
    {
      ScopedEnv env("HEARTH_AFFINE_GEMV", "bogus");
      auto other = load_cuda_model(dir, {});
      ASSERT_TRUE(other.ok()) << other.status().to_string();
      EXPECT_EQ((*other)->describe().find("unfused"), std::string::npos);
    }
    auto ids = goldens()["prompts"][3]["ids"].get<std::vector<int32_t>>();
    Runner a(**fused);
    Runner b(**reg);
    std::vector<float> la = a.prefill(ids, 3);
    std::vector<float> lb = b.prefill(ids, 3);
    for (int step = 0; step < 12; ++step) {
      ASSERT_EQ(la.size(), lb.size());
      EXPECT_LE(max_error_over_range(lb, std::vector<double>(la.begin(), la.end())), 1e-2)
          << dir << " step " << step;
      int32_t next = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
      la = a.step(std::span(&next, 1));
      lb = b.step(std::span(&next, 1));
    }
  }
}

// The tiled weight layout (the default where the whole fused step runs on the tensor-core
// GEMV: the wide model) gives the row-major layout's logits bit for bit, through prompt
// chunks of 3 (fused steps), a whole-prompt prefill (dequantized from the tiles), decode
// steps, and a 6-token step (unfused: per-row stores through the gated and RoPE tiles).
TEST(CudaQuantized, TiledLayoutGivesTheRowMajorBits) {
  const std::string dir = quantized_models()[1];  // wide: every k % 256 == 0
  Result<std::unique_ptr<Model>> row_major = [&] {
    ScopedEnv env("HEARTH_AFFINE_LAYOUT", "row-major");
    return load_cuda_model(dir, {});
  }();
  auto tiled = load_cuda_model(dir, {});
  ASSERT_TRUE(row_major.ok() && tiled.ok());
  EXPECT_EQ((*row_major)->describe().find("tiled"), std::string::npos);
  EXPECT_NE((*tiled)->describe().find("tiled weights"), std::string::npos) << (*tiled)->describe();
  auto ids = goldens()["prompts"][2]["ids"].get<std::vector<int32_t>>();
  for (std::size_t chunk : {std::size_t{3}, std::size_t{0}, std::size_t{6}}) {
    Runner a(**row_major);
    Runner b(**tiled);
    std::vector<float> la = a.prefill(ids, chunk);
    std::vector<float> lb = b.prefill(ids, chunk);
    for (int step = 0; step < 6; ++step) {
      ASSERT_EQ(la, lb) << "chunk " << chunk << " step " << step;
      int32_t next = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
      la = a.step(std::span(&next, 1));
      lb = b.step(std::span(&next, 1));
    }
  }
}

// A fused step that wants every token's logits (a decode batch) runs the final norm in the
// head GEMV's prologue; one that wants some rows runs the norm kernel and a gather first.
// The same 3 tokens both ways give the same logits for the rows both return, bit for bit.
TEST(CudaQuantized, AllRowsLogitsEqualGatheredRows) {
  for (const std::string& dir : quantized_models()) {
    auto model = load_cuda_model(dir, {});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    Model& m = **model;
    ASSERT_TRUE(m.create_kv_cache(8, 4).ok());
    const std::vector<int32_t> table = {5, 2, 7};
    const std::vector<int32_t> tokens = {3, 17, 42};
    const std::vector<int32_t> positions = {0, 1, 2};
    const SequenceSlice s{0, 3, 0, table};
    const std::size_t vocab = static_cast<std::size_t>(m.config().vocab_size);
    auto run = [&](std::vector<int32_t> rows) {
      ForwardBatch batch{tokens, positions, {&s, 1}, rows};
      std::vector<float> logits(rows.size() * vocab);
      Status st = m.forward(batch, logits);
      EXPECT_TRUE(st.ok()) << st.to_string();
      return logits;
    };
    const std::vector<float> all = run({0, 1, 2});  // the same KV slots rewritten each time
    for (int32_t r : {1, 2}) {
      const std::vector<float> one = run({r});
      ASSERT_TRUE(std::equal(one.begin(), one.end(), all.begin() + r * vocab))
          << dir << " row " << r;
    }
  }
}

// --batch-invariant on CUDA covers bf16 models only: a quantized one is refused at load with a
// message naming the way out.
TEST(CudaQuantized, BatchInvariantIsRefused) {
  CudaLoadOptions options;
  options.batch_invariant = true;
  auto model = load_cuda_model(quantized_models().front(), options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().to_string().find("--batch-invariant"), std::string::npos)
      << model.status().to_string();
}

}  // namespace
}  // namespace hearth
