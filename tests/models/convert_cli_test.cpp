// `hearth convert` through the real binary: every tiny f32 fixture quantized to 4-bit (group
// 32) and 8-bit (group 64) generates, through `hearth generate`, the greedy tokens
// transformers produced on the dequantized weights (goldens.json), and bad input (an existing
// output, unsupported bits or groups, an already-quantized source) is a clear error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/mapped_file.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = std::string(HEARTH_SOURCE_DIR) + "/tests/fixtures/models";

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string slurp(const std::string& path) {
  auto text = read_file(path);
  return text.ok() ? *text : std::string();
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A fresh scratch directory for this test binary.
fs::path scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::path(::testing::TempDir()) / ("convert_cli_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

CliRun hearth(const std::string& args) {
  static int calls = 0;
  const std::string err_path = (scratch() / ("stderr_" + std::to_string(++calls))).string();
  const std::string cmd = std::string(HEARTH_BINARY_DIR) + "/bin/hearth " + args + " 2>" + err_path;
  CliRun run;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) run.out.append(buf.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = slurp(err_path);
  return run;
}

const json& goldens() {
  static const json g = json::parse(slurp(kFixtures + "/goldens.json"));
  return g;
}

// The safetensors header of dir/model.safetensors (8-byte little-endian length, then JSON).
json safetensors_header(const fs::path& dir) {
  const std::string bytes = slurp((dir / "model.safetensors").string());
  if (bytes.size() < 8) return json::object();
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  if (bytes.size() < 8 + len) return json::object();
  return json::parse(bytes.substr(8, len), nullptr, false);
}

// Every quantized golden variant: convert its f32 source with the variant's bits and group,
// then greedy-generate its prompt (raw, EOS ignored, as transformers ran it).
TEST(ConvertCli, QuantizedGreedyTokensEqualTransformersOnDequantizedWeights) {
  int checked = 0;
  for (const auto& [name, variant] : goldens()["variants"].items()) {
    if (!variant.contains("source_dir")) continue;
    SCOPED_TRACE(name);
    const int bits = variant["bits"].get<int>();
    const int group = variant["group_size"].get<int>();
    const fs::path dst = scratch() / name;
    CliRun conv = hearth("convert " + kFixtures + "/" + variant["source_dir"].get<std::string>() +
                         " --mlx-path " + quote(dst.string()) + " -q --q-bits " +
                         std::to_string(bits) + " --q-group-size " + std::to_string(group));
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    EXPECT_NE(conv.err.find(std::to_string(bits) + "-bit, group " + std::to_string(group)),
              std::string::npos)
        << conv.err;

    const json config = json::parse(slurp((dst / "config.json").string()));
    EXPECT_EQ(config["quantization"]["bits"], bits);
    EXPECT_EQ(config["quantization"]["group_size"], group);
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
      EXPECT_TRUE(fs::is_regular_file(dst / file)) << file;
    }
    const json header = safetensors_header(dst);
    ASSERT_TRUE(header.contains("model.layers.0.mlp.down_proj.scales"));
    EXPECT_EQ(header["model.layers.0.mlp.down_proj.weight"]["dtype"], "U32");
    EXPECT_EQ(header["model.layers.0.mlp.down_proj.scales"]["dtype"], "F32");  // the source's

    const json& prompt = goldens()["prompts"][variant["greedy_prompt"].get<int>()];
    CliRun gen = hearth("generate " + quote(dst.string()) + " --prompt " +
                        quote(prompt["text"].get<std::string>()) +
                        " --raw --temperature 0 --ignore-eos --max-tokens 24 --json --threads 1"
                        " --cpu-int8-dot off");  // f32 activations, as transformers ran
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    const json out = json::parse(gen.out);
    EXPECT_EQ(out["token_ids"].get<std::vector<int32_t>>(),
              variant["greedy_tokens"].get<std::vector<int32_t>>());
    ++checked;
  }
  EXPECT_EQ(checked, 8);  // 4-bit and 8-bit of four families
}

// A bf16 source keeps its scales and biases in bf16 (as mlx_lm keeps the model's dtype) and
// the result loads and generates.
TEST(ConvertCli, Bf16SourceKeepsBf16Scales) {
  const fs::path dst = scratch() / "qwen2-bf16-q8";
  CliRun conv = hearth("convert " + kFixtures + "/qwen2-bf16 -o " + quote(dst.string()) +
                       " --q-bits 8 --q-group-size 64");
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const json header = safetensors_header(dst);
  EXPECT_EQ(header["model.layers.1.self_attn.q_proj.scales"]["dtype"], "BF16");
  EXPECT_EQ(header["model.layers.1.self_attn.q_proj.biases"]["dtype"], "BF16");
  EXPECT_EQ(header["model.norm.weight"]["dtype"], "BF16");  // norms are copied, not quantized
  CliRun gen = hearth("generate " + quote(dst.string()) +
                      " --prompt Hello --raw --temperature 0 --max-tokens 8 --ignore-eos --json");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(json::parse(gen.out)["completion_tokens"], 8);
}

TEST(ConvertCli, ExistingOutputNeedsForce) {
  const fs::path dst = scratch() / "existing";
  const std::string base =
      "convert " + kFixtures + "/mistral-f32 --mlx-path " + quote(dst.string());
  ASSERT_EQ(hearth(base + " --q-bits 8").exit_code, 0);

  CliRun again = hearth(base + " --q-bits 4 --q-group-size 32");
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  EXPECT_EQ(json::parse(slurp((dst / "config.json").string()))["quantization"]["bits"], 8);

  CliRun forced = hearth(base + " --q-bits 4 --q-group-size 32 --force");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(json::parse(slurp((dst / "config.json").string()))["quantization"]["bits"], 4);

  // --force never deletes a folder that is not a model.
  const fs::path other = scratch() / "not-a-model";
  fs::create_directories(other);
  std::ofstream(other / "notes.txt") << "keep me";
  CliRun refused =
      hearth("convert " + kFixtures + "/mistral-f32 -o " + quote(other.string()) + " --force");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("no config.json"), std::string::npos) << refused.err;
  EXPECT_TRUE(fs::is_regular_file(other / "notes.txt"));

  // No partial output is left beside the destination.
  for (const auto& entry : fs::directory_iterator(scratch())) {
    EXPECT_EQ(entry.path().filename().string().find(".partial-"), std::string::npos)
        << entry.path();
  }
}

TEST(ConvertCli, UnsupportedBitsAndGroupsAreUsageErrors) {
  const std::string base =
      "convert " + kFixtures + "/llama-f32 -o " + quote((scratch() / "never").string());
  CliRun bits = hearth(base + " --q-bits 3");
  EXPECT_EQ(bits.exit_code, 2);
  EXPECT_NE(bits.err.find("--q-bits must be 4 or 8"), std::string::npos) << bits.err;
  CliRun group = hearth(base + " --q-group-size 48");
  EXPECT_EQ(group.exit_code, 2);
  EXPECT_NE(group.err.find("--q-group-size must be 32, 64 or 128"), std::string::npos) << group.err;
  CliRun no_model = hearth("convert");
  EXPECT_EQ(no_model.exit_code, 2);
  EXPECT_FALSE(fs::exists(scratch() / "never"));
}

TEST(ConvertCli, QuantizedOrMissingSourceIsAClearError) {
  CliRun mlx =
      hearth("convert " + kFixtures + "/qwen3-mlx -o " + quote((scratch() / "requant").string()));
  EXPECT_EQ(mlx.exit_code, 1);
  EXPECT_NE(mlx.err.find("already quantized (8-bit, group 64)"), std::string::npos) << mlx.err;
  EXPECT_FALSE(fs::exists(scratch() / "requant"));

  CliRun missing =
      hearth("convert /nonexistent/model-dir -o " + quote((scratch() / "missing").string()));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("hearth convert:"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace hearth
