// The hearth binary's command line, driven as a user types it.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "cli/suggest.h"

namespace hearth::cli {
namespace {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr together
};

CliRun run_hearth(const std::string& args) {
  std::string cmd = std::string(HEARTH_BINARY_DIR) + "/bin/hearth " + args + " 2>&1";
  CliRun run{-1, ""};
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) run.output += buf.data();
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
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
  CliRun r = run_hearth("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("hearth "), std::string::npos) << r.output;
}

TEST(Cli, HelpListsOptions) {
  CliRun r = run_hearth("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--log-level"), std::string::npos) << r.output;
}

TEST(Cli, UnknownVerbIsUsageError) {
  CliRun r = run_hearth("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown command 'frobnicate'"), std::string::npos) << r.output;
}

TEST(Cli, UnknownFlagSuggestsClosest) {
  CliRun r = run_hearth("ls --log-levl debug");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("did you mean '--log-level'"), std::string::npos) << r.output;
}

// Bare `hearth` is `serve`: flags given with no verb are serve's.
TEST(Cli, FlagsWithoutVerbGoToServe) {
  CliRun r = run_hearth("--prot 9000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown option '--prot' for 'hearth serve'; did you mean '--port'?"),
            std::string::npos)
      << r.output;
  r = run_hearth("--port not-a-number");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--port"), std::string::npos) << r.output;
}

TEST(Cli, BadLogLevelIsUsageError) {
  CliRun r = run_hearth("--log-level loud");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown log level 'loud'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hearth::cli
