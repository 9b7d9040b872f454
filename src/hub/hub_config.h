// Where the Hub and the cache are, from the environment huggingface_hub reads:
// HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HF_ENDPOINT, HF_TOKEN (or the stored token file).
#pragma once

#include <filesystem>
#include <string>

namespace hearth::hub {

struct HubConfig {
  std::filesystem::path cache_dir;  // the hub cache root (holds models--org--name folders)
  std::string endpoint;             // "https://huggingface.co", no trailing slash
  std::string token;                // empty: anonymous
};

// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
std::filesystem::path hub_cache_dir_from_env();
// $HF_TOKEN, else the file at $HF_TOKEN_PATH or $HF_HOME/token (`huggingface-cli login`).
std::string hub_token_from_env();
HubConfig hub_config_from_env();

}  // namespace hearth::hub
