// A verb is one subcommand of the `hearth` binary: a CLI11 subcommand plus the function
// that runs it once parsing succeeded. Each verb lives in its own verb_<name>.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace hearth::cli {

struct Verb {
  CLI::App* command = nullptr;
  std::function<int()> run;  // returns the process exit code
};

// Exit codes shared by every verb.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work failed (message on stderr)
inline constexpr int kExitUsage = 2;    // bad command line

}  // namespace hearth::cli
