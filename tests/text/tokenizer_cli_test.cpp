// `hearth tokenize` through the real binary: encode/decode round trips, exact output bytes,
// stdin and file input, and the errors a user can trigger.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/run_binary.h"
#include "tokenizer_test_util.h"

namespace hearth::text {
namespace {

using tests::BinaryRun;
using tests::shell_quote;

// Runs a shell command line: stdout in `out`, stderr in `err`.
BinaryRun run_shell(const std::string& command) { return tests::run_command(command); }

std::string hearth() { return tests::hearth_binary(); }

std::string write_temp(const std::string& name, const std::string& content) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_tokenizer_dir("llama2");  // the smallest file: fast to load per run
    auto tok = load_test_tokenizer("llama2");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  }
  std::string dir_;
};

TEST_F(TokenizeCli, EncodePrintsOneJsonArrayMatchingTheLibrary) {
  auto tok = load_test_tokenizer("llama2");
  ASSERT_TRUE(tok.ok());
  const std::string text = "Hello, 世界! <|im_start|>user\n  x";
  BinaryRun r =
      run_shell(hearth() + " tokenize --tokenizer " + dir_ + " --text " + shell_quote(text));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto ids = tok->encode(text, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(r.out, nlohmann::json(*ids).dump() + "\n");
}

TEST_F(TokenizeCli, DecodePrintsTheTextExactlyWithoutANewline) {
  const std::string text = "line one\n\tcafé 🤖\n";
  std::string file = write_temp("tokenize_in.txt", text);
  BinaryRun enc =
      run_shell(hearth() + " tokenize --tokenizer " + dir_ + "/tokenizer.json --file " + file);
  ASSERT_EQ(enc.exit_code, 0) << enc.err;
  // ids from stdin
  BinaryRun dec = run_shell("printf '%s' " + shell_quote(enc.out) + " | " + hearth() +
                            " tokenize --decode --tokenizer " + dir_);
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out, text);
  // ids from --text and from --file give the same bytes
  BinaryRun dec_text = run_shell(hearth() + " tokenize --decode --tokenizer " + dir_ + " --text " +
                                 shell_quote(enc.out));
  EXPECT_EQ(dec_text.out, text);
  BinaryRun dec_file = run_shell(hearth() + " tokenize --decode --tokenizer " + dir_ + " --file " +
                                 write_temp("tokenize_ids.json", enc.out));
  EXPECT_EQ(dec_file.out, text);
}

TEST_F(TokenizeCli, SpecialFlagsAddAndSkipSpecialTokens) {
  std::string llama2 = test_tokenizer_dir("llama2");
  BinaryRun with = run_shell(hearth() + " tokenize --special --tokenizer " + llama2 + " --text hi");
  BinaryRun without = run_shell(hearth() + " tokenize --tokenizer " + llama2 + " --text hi");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  auto a = nlohmann::json::parse(with.out), b = nlohmann::json::parse(without.out);
  ASSERT_EQ(a.size(), b.size() + 1);
  EXPECT_EQ(a[0], 1);  // <s>
  BinaryRun keep = run_shell(hearth() + " tokenize --decode --tokenizer " + llama2 + " --text " +
                             shell_quote(with.out));
  BinaryRun skip = run_shell(hearth() + " tokenize --decode --skip-special --tokenizer " + llama2 +
                             " --text " + shell_quote(with.out));
  EXPECT_EQ(keep.out, "<s> hi");
  EXPECT_EQ(skip.out, "hi");
}

TEST_F(TokenizeCli, BenchPrintsThroughput) {
  BinaryRun r = run_shell(hearth() + " tokenize --bench 3 --tokenizer " + dir_ + " --text " +
                          shell_quote("some words to encode, repeated"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["rounds"], 3);
  EXPECT_GT(j["tokens"].get<int>(), 3);
  EXPECT_GT(j["mb_per_s"].get<double>(), 0.0);
}

TEST_F(TokenizeCli, ErrorsAreOneLineAndExitOne) {
  BinaryRun missing = run_shell(hearth() + " tokenize --tokenizer /nonexistent/dir --text x");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no tokenizer file"), std::string::npos) << missing.err;

  BinaryRun bad_id =
      run_shell(hearth() + " tokenize --decode --tokenizer " + dir_ + " --text '[1, 99999999]'");
  EXPECT_EQ(bad_id.exit_code, 1);
  EXPECT_NE(bad_id.err.find("outside the vocabulary"), std::string::npos) << bad_id.err;

  BinaryRun not_json =
      run_shell(hearth() + " tokenize --decode --tokenizer " + dir_ + " --text 'hello'");
  EXPECT_EQ(not_json.exit_code, 1);
  EXPECT_NE(not_json.err.find("JSON array"), std::string::npos) << not_json.err;

  std::string bad_utf8 = write_temp("tokenize_bad.txt", std::string("ok \xC3\x28 \xFF end"));
  BinaryRun invalid = run_shell(hearth() + " tokenize --tokenizer " + dir_ + " --file " + bad_utf8);
  EXPECT_EQ(invalid.exit_code, 1);
  EXPECT_NE(invalid.err.find("not valid UTF-8"), std::string::npos) << invalid.err;

  BinaryRun broken = run_shell(
      hearth() + " tokenize --tokenizer " +
      write_temp("broken_tokenizer.json", "{\"model\": {\"type\": \"WordLevel\"}}") + " --text x");
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_NE(broken.err.find("unsupported model type 'WordLevel'"), std::string::npos) << broken.err;

  BinaryRun usage = run_shell(hearth() + " tokenize --text x");
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace hearth::text
