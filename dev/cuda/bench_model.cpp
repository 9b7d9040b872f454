// Kernel-lab model benchmark (GPU machine): loads a HuggingFace model directory with the
// CUDA backend and times, through Model::forward, process start to first token, batch-1
// greedy decode (host argmax over the downloaded logits) and a long single prefill.
// Usage: hearth_cuda_bench_model <model dir> [prompt=128] [decode=128] [prefill=4096]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "models/cuda/cuda_llama_model.h"

namespace hearth {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int run(int argc, char** argv, Clock::time_point start) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <model dir> [prompt] [decode] [prefill]\n", argv[0]);
    return 2;
  }
  const int prompt_len = argc > 2 ? std::atoi(argv[2]) : 128;
  const int decode = argc > 3 ? std::atoi(argv[3]) : 128;
  const int prefill_len = argc > 4 ? std::atoi(argv[4]) : 4096;
  CudaLoadOptions options;
  options.show_progress = true;
  auto loaded = load_cuda_model(argv[1], options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "load failed: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  Model& model = **loaded;
  const double load_s = seconds_since(start);
  const int block = 16;
  const int blocks_per_seq = (std::max(prompt_len + decode, prefill_len) + block - 1) / block;
  Status st = model.create_kv_cache(2 * blocks_per_seq, block);
  if (!st.ok()) {
    std::fprintf(stderr, "kv: %s\n", st.to_string().c_str());
    return 1;
  }
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(7);
  std::vector<int32_t> table(blocks_per_seq);
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> logits(vocab);
  auto step = [&](std::span<const int32_t> tokens, int cached, std::span<const int32_t> tbl) {
    std::vector<int32_t> pos(tokens.size());
    std::iota(pos.begin(), pos.end(), cached);
    SequenceSlice s{0, static_cast<int32_t>(tokens.size()), cached, tbl};
    int32_t last = static_cast<int32_t>(tokens.size()) - 1;
    Status fs = model.forward(ForwardBatch{tokens, pos, {&s, 1}, {&last, 1}}, logits);
    if (!fs.ok()) {
      std::fprintf(stderr, "forward: %s\n", fs.to_string().c_str());
      std::exit(1);
    }
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  std::vector<int32_t> prompt(prompt_len);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % vocab);
  int32_t token = step(prompt, 0, table);
  const double first_token_s = seconds_since(start);
  // Decode: one token per forward, greedy on the host.
  auto t0 = Clock::now();
  for (int i = 0; i < decode; ++i) token = step({&token, 1}, prompt_len + i, table);
  const double decode_s = seconds_since(t0);
  // Prefill: a fresh sequence in the second half of the pool, three times, median.
  std::vector<int32_t> table2(blocks_per_seq);
  std::iota(table2.begin(), table2.end(), blocks_per_seq);
  std::vector<int32_t> long_prompt(prefill_len);
  for (auto& t : long_prompt) t = static_cast<int32_t>(rng() % vocab);
  std::vector<double> prefill_s;
  for (int r = 0; r < 3; ++r) {
    auto p0 = Clock::now();
    step(long_prompt, 0, table2);
    prefill_s.push_back(seconds_since(p0));
  }
  std::sort(prefill_s.begin(), prefill_s.end());
  std::printf("model: %s\n", model.describe().c_str());
  std::printf("load (process start to weights on device): %.2f s\n", load_s);
  std::printf("start to first token (prompt %d): %.2f s\n", prompt_len, first_token_s);
  std::printf("decode batch 1, %d tokens after a %d-token prompt: %.3f ms/token = %.1f tok/s\n",
              decode, prompt_len, 1e3 * decode_s / decode, decode / decode_s);
  std::printf("prefill %d tokens: %.1f ms = %.0f tok/s (median of 3)\n", prefill_len,
              1e3 * prefill_s[1], prefill_len / prefill_s[1]);
  return 0;
}

}  // namespace
}  // namespace hearth

int main(int argc, char** argv) {
  auto start = hearth::Clock::now();
  return hearth::run(argc, argv, start);
}
