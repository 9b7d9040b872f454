// `hearth perplexity` against transformers' figure for the starter model on
// tools/starter/heldout.txt (tools/starter/README.md: 4.759, float32, mlx_lm.perplexity's rows
// of 512 tokens, 33,215 scored). Minutes on two cores: labelled slow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <string>

#include "base/mapped_file.h"

namespace hearth {
namespace {

using nlohmann::json;

const std::string kSource = HEARTH_SOURCE_DIR;

struct PplRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

PplRun perplexity(const std::string& args) {
  const std::string err_path = ::testing::TempDir() + "/ppl_stderr.txt";
  std::string cmd =
      std::string(HEARTH_BINARY_DIR) + "/bin/hearth perplexity " + args + " 2>" + err_path;
  PplRun run;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) run.out.append(buf.data(), n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto err = read_file(err_path);
  run.err = err.ok() ? *err : "";
  return run;
}

TEST(PerplexityCli, StarterHeldoutAgreesWithTransformers) {
  PplRun r = perplexity(kSource + "/models/starter --data " + kSource +
                        "/tools/starter/heldout.txt --num-samples -1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["data_tokens"], 33363);  // the starter run's token count
  EXPECT_EQ(out["rows"], 65);
  EXPECT_EQ(out["scored_tokens"], 33215);
  EXPECT_NEAR(out["perplexity"].get<double>(), 4.759, 0.001);
  EXPECT_GT(out["standard_error"].get<double>(), 0.0);
}

}  // namespace
}  // namespace hearth
