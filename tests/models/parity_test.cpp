// Parity with HF transformers: tiny random llama / mistral / qwen2 / qwen3 models
// (tests/fixtures/models, made by tools/gen_model_fixtures.py) must reproduce the
// goldens' last-position logits (max abs error <= 1e-4 of the logit range; the goldens
// are float64 runs on the same weights) and their 24 greedy tokens, through the paged,
// varlen forward. Quantized variants are made here by hearth's quantizer and compared
// with transformers on the dequantized weights.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "base/mapped_file.h"
#include "common/batch_invariance_check.h"
#include "common/model_runner.h"
#include "kernels/cpu/int8_dot.h"
#include "models/model.h"
#include "models/quantize.h"
#include "models/safetensors.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
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

std::vector<int32_t> prompt(int i) {
  return goldens()["prompts"][i]["ids"].get<std::vector<int32_t>>();
}

// Every golden prompt's ids, in order.
std::vector<std::vector<int32_t>> all_prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (std::size_t i = 0; i < goldens()["prompts"].size(); ++i) {
    prompts.push_back(prompt(static_cast<int>(i)));
  }
  return prompts;
}

using Runner = tests::ModelRunner;

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

void expect_logits(const std::vector<float>& got, const json& want, double rel_tol,
                   const std::string& what) {
  std::vector<double> w = want.get<std::vector<double>>();
  ASSERT_EQ(got.size(), w.size()) << what;
  const auto [mn, mx] = std::minmax_element(w.begin(), w.end());
  const double range = *mx - *mn;
  double worst = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(got[i] - w[i]));
  EXPECT_LE(worst, rel_tol * range)
      << what << ": max abs error " << worst << " over range " << range;
}

void check_variant(Model& model, const json& g, const std::string& name, double tol) {
  const int num_prompts = static_cast<int>(goldens()["prompts"].size());
  for (int p = 0; p < num_prompts; ++p) {
    Runner runner(model);
    expect_logits(runner.prefill(prompt(p)), g["logits"][p], tol,
                  name + " prompt " + std::to_string(p));
  }
  // Greedy: prefill in chunks of 5 (chunked prefill), then one token per step.
  Runner runner(model);
  const int gp = g["greedy_prompt"].get<int>();
  std::vector<float> logits = runner.prefill(prompt(gp), 5);
  std::vector<int32_t> tokens;
  const auto want = g["greedy_tokens"].get<std::vector<int32_t>>();
  for (std::size_t i = 0; i < want.size(); ++i) {
    tokens.push_back(argmax(logits));
    logits = runner.step(std::span(&tokens.back(), 1));
  }
  EXPECT_EQ(tokens, want) << name << " greedy tokens";
}

std::unique_ptr<Model> load(const std::string& dir, KernelKind kernels = KernelKind::kCpu,
                            bool cpu_int8_dot = false, bool batch_invariant = false) {
  LoadOptions options{2, kernels};
  options.cpu_int8_dot = cpu_int8_dot;
  options.batch_invariant = batch_invariant;
  auto model = load_model(dir, options);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(model).value() : nullptr;
}

class DenseParity : public ::testing::TestWithParam<std::string> {};

TEST_P(DenseParity, LogitsAndGreedyMatchTransformers) {
  const json& g = goldens()["variants"][GetParam()];
  auto model = load(kFixtures + "/" + g["dir"].get<std::string>());
  ASSERT_NE(model, nullptr);
  check_variant(*model, g, GetParam(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DenseParity,
                         ::testing::Values("llama-f32", "llama-bf16", "mistral-f32", "mistral-bf16",
                                           "qwen2-f32", "qwen2-bf16", "qwen3-f32", "qwen3-bf16",
                                           "qwen3-mlx"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(ReferenceKernels, ForwardMatchesTransformers) {
  for (const char* name : {"mistral-f32", "qwen3-f32"}) {
    const json& g = goldens()["variants"][name];
    auto model = load(kFixtures + "/" + g["dir"].get<std::string>(), KernelKind::kReference);
    ASSERT_NE(model, nullptr);
    Runner runner(*model);
    expect_logits(runner.prefill(prompt(3)), g["logits"][3], 1e-4, name);
  }
}

class QuantizedParity : public ::testing::TestWithParam<std::string> {};

// Logit tolerance with int8 activations (--cpu-int8-dot), relative to the logit range: every
// activation entering a quantized linear moves by up to half a step of its group's int8 grid
// (max|x| / 254), ~0.5 % relative noise per layer; these random-weight fixtures measured
// 0.2-2.6 % of the range. Greedy tokens are not compared (the random fixtures have near-ties
// that the noise flips); decode steps are teacher-forced on transformers' tokens instead.
constexpr double kInt8DotTol = 5e-2;

// The int8 path: each prompt's logits against transformers, then decode steps fed the golden
// greedy tokens against the f32 path's logits at the same steps.
void check_int8_variant(Model& int8_model, Model& f32_model, const json& g,
                        const std::string& name) {
  const int num_prompts = static_cast<int>(goldens()["prompts"].size());
  for (int p = 0; p < num_prompts; ++p) {
    Runner runner(int8_model);
    expect_logits(runner.prefill(prompt(p)), g["logits"][p], kInt8DotTol,
                  name + " int8-dot prompt " + std::to_string(p));
  }
  Runner a(int8_model), b(f32_model);
  const int gp = g["greedy_prompt"].get<int>();
  std::vector<float> la = a.prefill(prompt(gp), 5);
  std::vector<float> lb = b.prefill(prompt(gp), 5);
  const auto tokens = g["greedy_tokens"].get<std::vector<int32_t>>();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    expect_logits(la, json(lb), kInt8DotTol, name + " int8-dot step " + std::to_string(i));
    la = a.step(std::span(&tokens[i], 1));
    lb = b.step(std::span(&tokens[i], 1));
  }
}

// Per-tensor sums of q / scales / biases as hearth's quantizer wrote them must equal the
// Python mirror of mlx.core.quantize's (the same f32 operations, so the same bits).
void expect_checksums(const std::string& dir, const json& want, int bits) {
  auto store = WeightStore::open(dir);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  for (const auto& [name, sums] : want.items()) {
    const std::string module = name.substr(0, name.size() - 7);
    auto w = store->get(name);
    auto s = store->get(module + ".scales");
    auto b = store->get(module + ".biases");
    ASSERT_TRUE(w.ok() && s.ok() && b.ok()) << name;
    int64_t q_sum = 0;
    for (int64_t i = 0; i < w->numel(); ++i) {
      const uint32_t word = w->as<uint32_t>()[i];
      for (int shift = 0; shift < 32; shift += bits) q_sum += (word >> shift) & ((1u << bits) - 1);
    }
    double s_sum = 0, b_sum = 0;
    for (int64_t i = 0; i < s->numel(); ++i) {
      s_sum += s->as<float>()[i];
      b_sum += b->as<float>()[i];
    }
    EXPECT_EQ(q_sum, sums["q_sum"].get<int64_t>()) << name;
    EXPECT_NEAR(s_sum, sums["scales_sum"].get<double>(), 1e-5 * (1 + std::abs(s_sum))) << name;
    EXPECT_NEAR(b_sum, sums["biases_sum"].get<double>(), 1e-5 * (1 + std::abs(b_sum))) << name;
  }
}

TEST_P(QuantizedParity, HearthQuantizerMatchesTransformersOnDequantizedWeights) {
  const json& g = goldens()["variants"][GetParam()];
  const std::string dir = std::string(HEARTH_BINARY_DIR) + "/fixtures/" + GetParam();
  QuantSpec spec{g["bits"].get<int>(), g["group_size"].get<int>()};
  Status st = quantize_model_dir(kFixtures + "/" + g["source_dir"].get<std::string>(), dir, spec,
                                 DType::kF32);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_checksums(dir, g["checksums"], spec.bits);
  auto model = load(dir);
  ASSERT_NE(model, nullptr);
  check_variant(*model, g, GetParam(), 1e-4);
  // With activations rounded to int8 per group (--cpu-int8-dot on, where the CPU has VNNI).
  if (!kernels::cpu::int8_dot_available()) return;
  auto int8_model = load(dir, KernelKind::kCpu, true);
  ASSERT_NE(int8_model, nullptr);
  check_int8_variant(*int8_model, *model, g, GetParam());
  // --batch-invariant on: every quantized linear reads only its rows16 copy (the row-major
  // codes are released: data null, so a stray read would fault), tied heads included.
  auto invariant_model = load(dir, KernelKind::kCpu, true, true);
  ASSERT_NE(invariant_model, nullptr);
  check_int8_variant(*invariant_model, *model, g, GetParam() + " batch-invariant");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedParity,
                         ::testing::Values("llama-q4g32", "llama-q8g64", "mistral-q4g32",
                                           "mistral-q8g64", "qwen2-q4g32", "qwen2-q8g64",
                                           "qwen3-q4g32", "qwen3-q8g64"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// --batch-invariant on the CPU (the CLI's default there, with --cpu-int8-dot on): a quantized
// model's logits are the same bits whatever shares the step (4- and 8-bit, the tied qwen3-mlx
// fixture, whose embedding gathers from the interleaved codes). Without the flag the decode
// rows sum in another order than the GEMM's and this fails.
TEST(CpuBatchInvariance, QuantizedLogitsAreBitIdentical) {
  if (!kernels::cpu::int8_dot_available()) GTEST_SKIP() << "no AVX512-VNNI int8 kernels here";
  const std::vector<std::vector<int32_t>> prompts = all_prompts();
  std::vector<std::string> dirs = {kFixtures + "/qwen3-mlx"};
  for (const QuantSpec spec : {QuantSpec{4, 32}, QuantSpec{8, 64}}) {
    const std::string dir =
        std::string(HEARTH_BINARY_DIR) + "/fixtures/invariance-llama-q" + std::to_string(spec.bits);
    Status st = quantize_model_dir(kFixtures + "/llama-f32", dir, spec, DType::kBF16);
    ASSERT_TRUE(st.ok()) << st.to_string();
    dirs.push_back(dir);
  }
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    auto model = load(dir, KernelKind::kCpu, true, true);
    ASSERT_NE(model, nullptr);
    EXPECT_NE(model->describe().find("batch-invariant"), std::string::npos) << model->describe();
    tests::expect_batch_invariant_logits(*model, prompts);
  }
}

// --batch-invariant on for float weights (and quantized ones off the int8 path): every row
// count runs in one order (float weights: the cache-blocked GEMM's, over the panels16 copy
// load makes; quantized: dot-product tiles). Without it the mat-vec (1-4 rows) and the blocked
// GEMM (16+) sum in other orders and the chunked / batched logits differ in their last bits.
TEST(CpuBatchInvariance, FloatLogitsAreBitIdentical) {
  const std::vector<std::vector<int32_t>> prompts = all_prompts();
  for (const char* dir : {"llama-f32", "llama-bf16", "mistral-f32", "qwen3-mlx"}) {
    SCOPED_TRACE(dir);
    LoadOptions options{2, KernelKind::kCpu};
    options.batch_invariant = true;
    auto model = load_model(kFixtures + "/" + dir, options);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_NE((*model)->describe().find("batch-invariant"), std::string::npos)
        << (*model)->describe();
    tests::expect_batch_invariant_logits(**model, prompts);
  }
}

// auto: on where the int8 path makes it cheap, off for float weights (their form is not yet
// measured on issue 4's host).
TEST(CpuBatchInvariance, AutoIsOnForTheInt8PathOnly) {
  LoadOptions options{2, KernelKind::kCpu};
  options.batch_invariant_auto = true;
  options.cpu_int8_dot = true;
  auto dense = load_model(kFixtures + "/llama-bf16", options);
  ASSERT_TRUE(dense.ok()) << dense.status().to_string();
  EXPECT_EQ((*dense)->describe().find("batch-invariant"), std::string::npos)
      << (*dense)->describe();
  if (!kernels::cpu::int8_dot_available()) return;
  auto quantized = load_model(kFixtures + "/qwen3-mlx", options);
  ASSERT_TRUE(quantized.ok()) << quantized.status().to_string();
  EXPECT_NE((*quantized)->describe().find("batch-invariant"), std::string::npos)
      << (*quantized)->describe();
}

// A bf16 model with --cpu-bf16-dot on and --batch-invariant on (a library caller may set
// both; the CLI refuses the pair): invariance wins, the bf16 prefill GEMM is not used, the
// logits keep their bits whatever shares the step (with the GEMM they did not: prompts 1-3
// in chunks of 5, every prompt together, the decode row beside a prefill).
TEST(CpuBatchInvariance, Bf16DotYieldsToInvariance) {
  const std::vector<std::vector<int32_t>> prompts = all_prompts();
  LoadOptions options{2, KernelKind::kCpu};
  options.cpu_bf16_dot = true;
  options.batch_invariant = true;
  auto model = load_model(kFixtures + "/llama-bf16", options);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->describe().find("avx512-bf16"), std::string::npos) << (*model)->describe();
  tests::expect_batch_invariant_logits(**model, prompts);
}

// Several sequences (prefill chunks and decode rows) in one forward call must give each
// sequence the logits it gets alone.
TEST(VarlenBatch, MixedSequencesMatchGoldens) {
  const json& g = goldens()["variants"]["mistral-f32"];
  auto model = load(kFixtures + "/mistral-f32");
  ASSERT_NE(model, nullptr);
  const int block_size = 4;
  ASSERT_TRUE(model->create_kv_cache(128, block_size).ok());
  const int num = static_cast<int>(goldens()["prompts"].size());
  std::vector<std::vector<int32_t>> tables(num);
  for (int b = 0; b < 128; ++b) tables[b % num].push_back(127 - b);  // interleaved blocks
  // Step 1: every prompt but its last token, all in one batch. Step 2: the last tokens.
  for (int phase = 0; phase < 2; ++phase) {
    std::vector<int32_t> tokens, positions, rows;
    std::vector<SequenceSlice> seqs;
    for (int p = 0; p < num; ++p) {
      auto ids = prompt(p);
      const int32_t begin = phase == 0 ? 0 : static_cast<int32_t>(ids.size()) - 1;
      const int32_t end =
          phase == 0 ? static_cast<int32_t>(ids.size()) - 1 : static_cast<int32_t>(ids.size());
      if (end <= begin) continue;
      seqs.push_back({static_cast<int32_t>(tokens.size()), end - begin, begin, tables[p]});
      for (int32_t i = begin; i < end; ++i) {
        tokens.push_back(ids[i]);
        positions.push_back(i);
      }
      rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    std::vector<float> logits(rows.size() * 320);
    Status st = model->forward(ForwardBatch{tokens, positions, seqs, rows}, logits);
    ASSERT_TRUE(st.ok()) << st.to_string();
    if (phase == 1) {
      for (int p = 0; p < num; ++p) {
        std::vector<float> row(logits.begin() + p * 320, logits.begin() + (p + 1) * 320);
        expect_logits(row, g["logits"][p], 1e-4, "batched prompt " + std::to_string(p));
      }
    }
  }
}

TEST(ForwardValidation, BadBatchesAreErrors) {
  auto model = load(kFixtures + "/qwen3-f32");
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->create_kv_cache(4, 4).ok());
  std::vector<int32_t> table = {0, 1};
  std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<int32_t> positions = {0, 1, 2};
  std::vector<int32_t> rows = {2};
  std::vector<float> logits(320);
  SequenceSlice ok{0, 3, 0, table};
  EXPECT_TRUE(model->forward({tokens, positions, {&ok, 1}, rows}, logits).ok());
  std::vector<int32_t> bad_tokens = {1, 999, 3};
  EXPECT_FALSE(model->forward({bad_tokens, positions, {&ok, 1}, rows}, logits).ok());
  std::vector<int32_t> bad_table = {0, 7};
  SequenceSlice bad_block{0, 3, 2, bad_table};
  EXPECT_FALSE(model->forward({tokens, positions, {&bad_block, 1}, rows}, logits).ok());
  SequenceSlice too_long{0, 3, 6, table};
  EXPECT_FALSE(model->forward({tokens, positions, {&too_long, 1}, rows}, logits).ok());
  std::vector<int32_t> bad_rows = {3};
  EXPECT_FALSE(model->forward({tokens, positions, {&ok, 1}, bad_rows}, logits).ok());
}

}  // namespace
}  // namespace hearth
