// Environment lookup for the Hub endpoint, token and cache root.
#include "hub/hub_config.h"

#include <cstdlib>

#include "base/mapped_file.h"

namespace hearth::hub {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::filesystem::path hf_home() {
  if (std::string home = env("HF_HOME"); !home.empty()) return home;
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    return std::filesystem::path(xdg) / "huggingface";
  }
  return std::filesystem::path(env("HOME")) / ".cache" / "huggingface";
}

std::string trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  size_t start = text.find_first_not_of(" \t");
  return start == std::string::npos ? std::string() : text.substr(start);
}

}  // namespace

std::filesystem::path hub_cache_dir_from_env() {
  if (std::string dir = env("HF_HUB_CACHE"); !dir.empty()) return dir;
  if (std::string dir = env("HUGGINGFACE_HUB_CACHE"); !dir.empty()) return dir;
  return hf_home() / "hub";
}

std::string hub_token_from_env() {
  if (std::string token = trim(env("HF_TOKEN")); !token.empty()) return token;
  std::string path = env("HF_TOKEN_PATH");
  if (path.empty()) path = (hf_home() / "token").string();
  auto text = read_file(path);
  return text.ok() ? trim(*text) : std::string();
}

HubConfig hub_config_from_env() {
  HubConfig config;
  config.cache_dir = hub_cache_dir_from_env();
  config.endpoint = env("HF_ENDPOINT");
  if (config.endpoint.empty()) config.endpoint = "https://huggingface.co";
  while (!config.endpoint.empty() && config.endpoint.back() == '/') config.endpoint.pop_back();
  config.token = hub_token_from_env();
  return config;
}

}  // namespace hearth::hub
