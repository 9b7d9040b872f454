// Runs the built hearth binary (or any shell command) as a user would and captures what it
// printed and its exit code: the CLI tests of every layer drive the real binary through this
// one helper. Header-only; tests/ is on every test's include path (hearth_test()).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace hearth::tests {

struct BinaryRun {
  int exit_code = -1;  // -1 when the command did not start or did not exit normally
  std::string out;     // stdout, and stderr too when merged
  std::string err;     // stderr when captured apart
};

enum class Stderr { kApart, kMerged };

// The hearth binary of this build.
inline std::string hearth_binary() { return std::string(HEARTH_BINARY_DIR) + "/bin/hearth"; }

// A waitpid()/pclose() status as an exit code: -1 when killed by a signal.
inline int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `command` through /bin/sh; stderr goes to `err` (through a private temporary file, so
// tests running in parallel never share one) or, with Stderr::kMerged, into `out`.
inline BinaryRun run_command(const std::string& command, Stderr stderr_to = Stderr::kApart) {
  BinaryRun run;
  std::string err_path;
  std::string cmd = command;
  if (stderr_to == Stderr::kApart) {
    std::string tmpl = ::testing::TempDir() + "/hearth_stderr_XXXXXX";
    int fd = mkstemp(tmpl.data());
    if (fd < 0) return run;
    close(fd);
    err_path = tmpl;
    cmd += " 2>" + shell_quote(err_path);
  } else {
    cmd += " 2>&1";
  }
  if (FILE* pipe = popen(cmd.c_str(), "r"); pipe != nullptr) {
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) run.out.append(buf.data(), n);
    run.exit_code = exit_code_of(pclose(pipe));
  }
  if (!err_path.empty()) {
    std::ifstream err(err_path, std::ios::binary);
    run.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
    std::remove(err_path.c_str());
  }
  return run;
}

// Runs `hearth <args>` (args already shell-quoted where they need it).
inline BinaryRun run_hearth(const std::string& args, Stderr stderr_to = Stderr::kApart) {
  return run_command(hearth_binary() + " " + args, stderr_to);
}

}  // namespace hearth::tests
