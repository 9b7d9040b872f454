// `hearth perplexity` through the real binary: the data formats, batching and the errors.
// The oracle check against transformers (the starter model's held-out figure) is in
// perplexity_slow_test.cpp, labelled slow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "common/run_binary.h"

namespace hearth {
namespace {

using nlohmann::json;

const std::string kSource = HEARTH_SOURCE_DIR;
const std::string kFixture = kSource + "/tests/fixtures/models/qwen3-f32";

using tests::BinaryRun;

// `hearth perplexity <args>`, stdout in `out` and stderr in `err`.
BinaryRun perplexity(const std::string& args) { return tests::run_hearth("perplexity " + args); }

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

// Text, chat and prompt/completion records; each gives a finite perplexity over the rows the
// records make.
TEST(PerplexityCli, JsonlFormats) {
  std::string text_lines, chat_lines, pc_lines;
  for (int i = 0; i < 12; ++i) {
    const std::string s = "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog.";
    text_lines += json{{"text", s}}.dump() + "\n";
    chat_lines += json{{"messages", json::array({{{"role", "user"}, {"content", s}},
                                                 {{"role", "assistant"}, {"content", "ok"}}})}}
                      .dump() +
                  "\n";
    pc_lines += json{{"prompt", s}, {"completion", "ok"}}.dump() + "\n";
  }
  for (const auto& [name, body] :
       {std::pair{"text.jsonl", text_lines}, std::pair{"chat.jsonl", chat_lines},
        std::pair{"pc.jsonl", pc_lines}}) {
    SCOPED_TRACE(name);
    BinaryRun r = perplexity(kFixture + " --data " + write_temp(name, body) +
                             " --sequence-length 32 --num-samples 4 --batch-size 3 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json out = json::parse(r.out);
    EXPECT_EQ(out["rows"], 4);
    EXPECT_EQ(out["scored_tokens"], 4 * 31);
    // A tiny random model: huge but finite.
    EXPECT_GT(out["perplexity"].get<double>(), 1.0);
    EXPECT_TRUE(std::isfinite(out["perplexity"].get<double>()));
  }
}

// Rows are scored independently, so the batch size must not change the result.
TEST(PerplexityCli, BatchSizeDoesNotChangeTheResult) {
  const std::string args = kFixture + " --data " + kSource +
                           "/tools/starter/README.md --sequence-length 48 --num-samples 5 --json";
  BinaryRun one = perplexity(args + " --batch-size 1");
  BinaryRun four = perplexity(args + " --batch-size 4");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(four.exit_code, 0) << four.err;
  // Equal up to the f32 summation order of different GEMM shapes.
  EXPECT_NEAR(json::parse(one.out)["mean_nll"].get<double>(),
              json::parse(four.out)["mean_nll"].get<double>(), 1e-5);
}

TEST(PerplexityCli, BadInputIsAClearError) {
  BinaryRun missing = perplexity(kFixture + " --data /nonexistent.txt");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("hearth perplexity:"), std::string::npos) << missing.err;

  BinaryRun short_data =
      perplexity(kFixture + " --sequence-length 64 --data " + write_temp("short.txt", "hi"));
  EXPECT_EQ(short_data.exit_code, 1);
  EXPECT_NE(short_data.err.find("fewer than one row"), std::string::npos) << short_data.err;

  BinaryRun bad_line = perplexity(kFixture + " --sequence-length 64 --data " +
                                  write_temp("bad.jsonl", "{\"text\": \"a\"}\nnot json\n"));
  EXPECT_EQ(bad_line.exit_code, 1);
  EXPECT_NE(bad_line.err.find(":2: not a JSON object"), std::string::npos) << bad_line.err;

  BinaryRun no_field = perplexity(kFixture + " --sequence-length 64 --data " +
                                  write_temp("nf.jsonl", "{\"x\": 1}\n"));
  EXPECT_EQ(no_field.exit_code, 1);

  BinaryRun usage = perplexity(kFixture + " --data x.txt --sequence-length 1");
  EXPECT_EQ(usage.exit_code, 2);

  BinaryRun too_long = perplexity(kFixture + " --data x.txt --sequence-length 4000");
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_NE(too_long.err.find("context"), std::string::npos) << too_long.err;
}

}  // namespace
}  // namespace hearth
