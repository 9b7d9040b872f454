// The device flags through the real binary: --device cpu runs and reports its device,
// --device cuda fails with a clear message where no GPU is visible (CI) and runs where one
// is, bad choices are usage errors, --memory-budget is enforced, and the engine levels of
// `hearth benchmark --concurrency` report throughput and the cached-prefix TTFT.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/run_binary.h"
#include "models/device.h"

namespace hearth {
namespace {

using tests::BinaryRun;

// `hearth <args>`, stdout and stderr together in `out`.
BinaryRun run_hearth(const std::string& args) {
  return tests::run_hearth(args, tests::Stderr::kMerged);
}

const std::string kModel = std::string(HEARTH_SOURCE_DIR) + "/tests/fixtures/models/llama-bf16";

TEST(DeviceCli, CpuBenchmarkReportsDevice) {
  BinaryRun r = run_hearth("benchmark " + kModel +
                           " --device cpu --prompt-tokens 8 --tokens 4 --runs 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_FALSE(j["compiled_decode"].get<bool>());
  EXPECT_EQ(j["kv_scheme"], "bf16 paged");
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
}

TEST(DeviceCli, CudaWithoutDeviceIsClearError) {
  BinaryRun r = run_hearth("benchmark " + kModel +
                           " --device cuda --prompt-tokens 8 --tokens 4 "
                           "--runs 1 --json");
  if (cuda_device_count() > 0) {
    ASSERT_EQ(r.exit_code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    EXPECT_EQ(j["device"], "cuda");
    EXPECT_GT(j["peak_device_mib"].get<double>(), 0.0);
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("--device cuda"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--device cpu"), std::string::npos) << r.out;  // the way out
  // The same check guards generate and serve before any file is read.
  BinaryRun g = run_hearth("generate " + kModel + " --raw -p hi --device cuda");
  EXPECT_EQ(g.exit_code, 1) << g.out;
  EXPECT_NE(g.out.find("--device cuda"), std::string::npos) << g.out;
  BinaryRun s = run_hearth("serve " + kModel + " --port 0 --device cuda");
  EXPECT_EQ(s.exit_code, 1) << s.out;
  EXPECT_NE(s.out.find("--device cuda"), std::string::npos) << s.out;
}

TEST(DeviceCli, AutoPicksCpuWithoutDevice) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible: auto picks cuda";
  BinaryRun r = run_hearth("benchmark " + kModel + " --prompt-tokens 8 --tokens 4 --runs 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(r.out.find('{')))["device"], "cpu");
}

TEST(DeviceCli, BadChoicesAreUsageErrors) {
  EXPECT_EQ(run_hearth("benchmark " + kModel + " --device gpu").exit_code, 2);
  EXPECT_EQ(run_hearth("benchmark " + kModel + " --compiled-decode maybe").exit_code, 2);
  EXPECT_EQ(run_hearth("benchmark " + kModel + " --memory-budget -1").exit_code, 2);
  EXPECT_EQ(run_hearth("serve " + kModel + " --gpu-memory-utilization 1.5").exit_code, 2);
  EXPECT_EQ(run_hearth("benchmark " + kModel + " --batch-invariant maybe").exit_code, 2);
  // The flag's earlier name still parses (an alias).
  BinaryRun alias =
      run_hearth("benchmark " + kModel +
                 " --device cpu --cpu-batch-invariant on --prompt-tokens 8 --tokens 2 "
                 "--runs 1 --json");
  EXPECT_EQ(alias.exit_code, 0) << alias.out;
}

// `benchmark --json`'s levers line for a model and extra flags ("" when the run failed).
std::string levers_of(const std::string& model, const std::string& flags) {
  BinaryRun r = run_hearth("benchmark " + model +
                           " --device cpu --prompt-tokens 8 --tokens 2 --runs 1 --json" + flags);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  if (r.exit_code != 0) return std::string();
  return nlohmann::json::parse(r.out.substr(r.out.find('{')))["levers"].get<std::string>();
}

// --batch-invariant auto (the default) is on for a CPU model on the int8 path: the 8-bit
// starter's (where the CPU has VNNI) says so in `levers`; off takes it away.

TEST(DeviceCli, BatchInvariantAutoIsOnForTheCpu) {
  const std::string starter = std::string(HEARTH_SOURCE_DIR) + "/models/starter";  // 8-bit
  auto levers = [&](const std::string& flags) { return levers_of(starter, flags); };
  const std::string by_default = levers("");
  if (by_default.find("avx512-vnni") == std::string::npos) {
    GTEST_SKIP() << "no int8 path on this CPU: " << by_default;
  }
  EXPECT_NE(by_default.find("batch-invariant"), std::string::npos) << by_default;
  EXPECT_EQ(levers(" --batch-invariant off").find("batch-invariant"), std::string::npos);
}

// A float model: auto leaves it off (it would cost prefill speed), on turns it on.
TEST(DeviceCli, BatchInvariantAutoIsOffForFloatWeights) {
  EXPECT_EQ(levers_of(kModel, "").find("batch-invariant"), std::string::npos);
  EXPECT_NE(levers_of(kModel, " --batch-invariant on").find("batch-invariant"), std::string::npos);
}

// The bf16 prefill GEMM is not batch-invariant: asking for both is a one-line error.
TEST(DeviceCli, BatchInvariantOnRefusesCpuBf16Dot) {
  BinaryRun r = run_hearth("benchmark " + kModel +
                           " --device cpu --runs 1 --cpu-bf16-dot on --batch-invariant on");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("--batch-invariant on cannot be combined with --cpu-bf16-dot on"),
            std::string::npos)
      << r.out;
}

TEST(DeviceCli, MemoryBudgetTooSmallFails) {
  BinaryRun r = run_hearth("benchmark " + kModel + " --device cpu --memory-budget 0.0001 --runs 1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("--memory-budget"), std::string::npos) << r.out;
  BinaryRun g =
      run_hearth("generate " + kModel + " --raw -p hi --device cpu --memory-budget 0.0001");
  EXPECT_EQ(g.exit_code, 1) << g.out;
  EXPECT_NE(g.out.find("--memory-budget"), std::string::npos) << g.out;
}

TEST(DeviceCli, EngineLevelsAndCachedPrefix) {
  BinaryRun r = run_hearth("benchmark " + kModel +
                           " --device cpu --prompt-tokens 8 --tokens 4 --runs 1 --concurrency 1,3 "
                           "--prefix-tokens 40 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const auto& levels = j["engine"]["levels"];
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[1]["concurrency"], 3);
  EXPECT_EQ(levels[1]["generated_tokens"], 12);
  EXPECT_GT(levels[1]["output_tok_s"].get<double>(), 0.0);
  // 40 prefix tokens = 2 full blocks of 16 reused; the suffix request computes the rest.
  EXPECT_EQ(j["engine"]["prefix"]["cached_tokens"], 32);
  EXPECT_GT(j["engine"]["prefix"]["suffix_ttft_ms"].get<double>(), 0.0);
  // A second suffix over the same prefix: the same cached blocks, its own TTFT.
  EXPECT_EQ(j["engine"]["prefix"]["again_cached_tokens"], 32);
  EXPECT_GT(j["engine"]["prefix"]["suffix_again_ttft_ms"].get<double>(), 0.0);
}

}  // namespace
}  // namespace hearth
