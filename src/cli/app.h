// The hearth command line: builds the CLI11 app from the verb table, parses argv with
// typo suggestions, and dispatches. Kept apart from main() so tests can drive it.
#pragma once

#include <string>
#include <vector>

namespace hearth::cli {

// Runs `hearth` with the given arguments (argv without the program name) and returns
// the exit code. Usage errors print one line to stderr and return kExitUsage.
int run_cli(const std::vector<std::string>& args);

}  // namespace hearth::cli
