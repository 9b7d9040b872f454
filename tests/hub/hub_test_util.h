// Test helpers for the hub layer: temp dirs, the mock Hub (tests/hub/mock_hub.mjs, a
// real HTTP server on loopback) as a child process, and running the real `hearth` binary
// with the HF environment pointed at them.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/run_binary.h"

namespace hearth::hub::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

class MockHub {
 public:
  // Starts `node mock_hub.mjs <args> --log <log>`; aborts the test binary if it cannot.
  MockHub(const std::vector<std::string>& args, fs::path log);
  ~MockHub();
  const std::string& endpoint() const { return endpoint_; }
  // Every request the mock received, in order: {method, host, path, range, auth}.
  std::vector<nlohmann::json> requests() const;
  // Requests whose path ends with `suffix`.
  std::vector<nlohmann::json> requests_for(const std::string& suffix) const;

 private:
  pid_t pid_ = -1;
  std::string endpoint_;
  fs::path log_;
};

using HearthRun = hearth::tests::BinaryRun;

using Env = std::map<std::string, std::string>;  // "" value: unset the variable

// Starts bin/hearth with args and env overrides; stdout/stderr go to files in `scratch`.
pid_t spawn_hearth(const std::vector<std::string>& args, const Env& env, const fs::path& scratch);
HearthRun wait_hearth(pid_t pid, const fs::path& scratch);
HearthRun run_hearth(const std::vector<std::string>& args, const Env& env, const fs::path& scratch);

std::string read_text(const fs::path& path);
void write_text(const fs::path& path, const std::string& text);

}  // namespace hearth::hub::testing
