// `hearth perplexity` against transformers' figure for the starter model on
// tools/starter/heldout.txt (tools/starter/README.md: 4.759, float32, mlx_lm.perplexity's rows
// of 512 tokens, 33,215 scored). Minutes on two cores: labelled slow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "common/run_binary.h"

namespace hearth {
namespace {

using nlohmann::json;

const std::string kSource = HEARTH_SOURCE_DIR;

using tests::BinaryRun;

// `hearth perplexity <args>`, stdout in `out` and stderr in `err`.
BinaryRun perplexity(const std::string& args) { return tests::run_hearth("perplexity " + args); }

TEST(PerplexityCli, StarterHeldoutAgreesWithTransformers) {
  BinaryRun r = perplexity(kSource + "/models/starter --data " + kSource +
                           "/tools/starter/heldout.txt --num-samples -1 --json --cpu-int8-dot off");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["data_tokens"], 33363);  // the starter run's token count
  EXPECT_EQ(out["rows"], 65);
  EXPECT_EQ(out["scored_tokens"], 33215);
  EXPECT_NEAR(out["perplexity"].get<double>(), 4.759, 0.001);
  EXPECT_GT(out["standard_error"].get<double>(), 0.0);
}

// With activations rounded to int8 per group (--cpu-int8-dot on, the default where the CPU has
// VNNI) the perplexity stays within 0.5 % of transformers' (benchmarks/RESULTS.md: 4.7661).
TEST(PerplexityCli, StarterHeldoutWithInt8DotWithinHalfAPercent) {
  BinaryRun r = perplexity(kSource + "/models/starter --data " + kSource +
                           "/tools/starter/heldout.txt --num-samples -1 --json --cpu-int8-dot on");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["scored_tokens"], 33215);
  EXPECT_NEAR(out["perplexity"].get<double>(), 4.759, 0.005 * 4.759);
}

}  // namespace
}  // namespace hearth
