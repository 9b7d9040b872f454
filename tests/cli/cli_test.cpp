// The hearth binary's command line, driven as a user types it.
#include <gtest/gtest.h>

#include <string>

#include "cli/suggest.h"
#include "common/run_binary.h"

namespace hearth::cli {
namespace {

using tests::BinaryRun;

// `hearth <args>`, stdout and stderr together in `out`.
BinaryRun run_hearth(const std::string& args) {
  return tests::run_hearth(args, tests::Stderr::kMerged);
}

TEST(Suggest, EditDistance) {
  EXPECT_EQ(edit_distance("serve", "serve"), 0u);
  EXPECT_EQ(edit_distance("sevre", "serve"), 2u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(Suggest, ClosestMatchOnlyForPlausibleTypos) {
  std::vector<std::string> verbs = {"serve", "generate", "benchmark", "tokenize"};
  EXPECT_EQ(closest_match("genrate", verbs), "generate");
  EXPECT_EQ(closest_match("tokenise", verbs), "tokenize");
  EXPECT_FALSE(closest_match("xyzzy", verbs).has_value());
}

TEST(Cli, VersionPrintsName) {
  BinaryRun r = run_hearth("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("hearth "), std::string::npos) << r.out;
}

TEST(Cli, HelpListsOptions) {
  BinaryRun r = run_hearth("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--log-level"), std::string::npos) << r.out;
}

TEST(Cli, UnknownVerbIsUsageError) {
  BinaryRun r = run_hearth("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown command 'frobnicate'"), std::string::npos) << r.out;
}

TEST(Cli, UnknownFlagSuggestsClosest) {
  BinaryRun r = run_hearth("ls --log-levl debug");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("did you mean '--log-level'"), std::string::npos) << r.out;
}

// Bare `hearth` is `serve`: flags given with no verb are serve's.
TEST(Cli, FlagsWithoutVerbGoToServe) {
  BinaryRun r = run_hearth("--prot 9000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown option '--prot' for 'hearth serve'; did you mean '--port'?"),
            std::string::npos)
      << r.out;
  r = run_hearth("--port not-a-number");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--port"), std::string::npos) << r.out;
}

TEST(Cli, BadLogLevelIsUsageError) {
  BinaryRun r = run_hearth("--log-level loud");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown log level 'loud'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace hearth::cli
