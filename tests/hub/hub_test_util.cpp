// Test helpers for the hub layer (see hub_test_util.h).
#include "hub_test_util.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/check.h"

namespace hearth::hub::testing {

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "hearth-hub-XXXXXX").string();
  HEARTH_CHECK(mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

MockHub::MockHub(const std::vector<std::string>& args, fs::path log) : log_(std::move(log)) {
  int fds[2];
  HEARTH_CHECK(pipe(fds) == 0);
  std::string script = std::string(HEARTH_SOURCE_DIR) + "/tests/hub/mock_hub.mjs";
  std::vector<std::string> argv = {"node", script, "--log", log_.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = fork();
  HEARTH_CHECK(pid_ >= 0, "fork failed");
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> cargs;
    for (auto& a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    execvp("node", cargs.data());
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  pollfd pfd{fds[0], POLLIN, 0};
  while (line.find('\n') == std::string::npos && poll(&pfd, 1, 15000) > 0) {
    char buf[256];
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  HEARTH_CHECK(line.rfind("listening ", 0) == 0, "mock hub did not start: '{}'", line);
  endpoint_ = "http://127.0.0.1:" + line.substr(10, line.find('\n') - 10);
}

MockHub::~MockHub() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
}

std::vector<nlohmann::json> MockHub::requests() const {
  std::vector<nlohmann::json> out;
  std::ifstream in(log_);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<nlohmann::json> MockHub::requests_for(const std::string& suffix) const {
  std::vector<nlohmann::json> out;
  for (auto& r : requests()) {
    std::string path = r["path"];
    if (path.size() >= suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(r);
    }
  }
  return out;
}

pid_t spawn_hearth(const std::vector<std::string>& args, const Env& env, const fs::path& scratch) {
  std::string bin = hearth::tests::hearth_binary();
  std::string out = (scratch / "stdout").string();
  std::string err = (scratch / "stderr").string();
  pid_t pid = fork();
  HEARTH_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    for (const auto& [name, value] : env) {
      if (value.empty()) {
        unsetenv(name.c_str());
      } else {
        setenv(name.c_str(), value.c_str(), 1);
      }
    }
    if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(126);
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargs;
    for (auto& a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    execv(bin.c_str(), cargs.data());
    _exit(127);
  }
  return pid;
}

HearthRun wait_hearth(pid_t pid, const fs::path& scratch) {
  int status = 0;
  waitpid(pid, &status, 0);
  HearthRun run;
  run.exit_code = hearth::tests::exit_code_of(status);
  run.out = read_text(scratch / "stdout");
  run.err = read_text(scratch / "stderr");
  return run;
}

HearthRun run_hearth(const std::vector<std::string>& args, const Env& env,
                     const fs::path& scratch) {
  return wait_hearth(spawn_hearth(args, env, scratch), scratch);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace hearth::hub::testing
