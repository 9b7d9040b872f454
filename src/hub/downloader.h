// `hearth get`: downloads a repo revision into the HF cache. Lists the files through the
// API, fetches missing blobs in parallel (Range-resuming *.incomplete files), verifies
// each against the Hub's sha256 / git blob id, links the snapshot, then writes the ref.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"
#include "hub/hub_config.h"
#include "hub/progress.h"

namespace hearth::hub {

struct GetOptions {
  std::string repo_id;
  std::string revision = "main";
  std::vector<std::string> include;  // globs; empty: every file
  std::vector<std::string> exclude;
  int parallel = 8;                           // files in flight at once
  const std::atomic<bool>* cancel = nullptr;  // set: stop, leaving resumable state
  DownloadProgress* progress = nullptr;       // may be null
  int retries = 5;                            // per request, on 429/5xx/dropped connections
};

struct GetResult {
  std::string commit;
  std::filesystem::path snapshot_dir;
  int files = 0;       // files in the snapshot after filtering
  int downloaded = 0;  // fetched over the network this time
  int reused = 0;      // already complete in the cache
  std::uint64_t bytes_total = 0;
};

Result<GetResult> get_repo(const HubConfig& config, const GetOptions& options);

}  // namespace hearth::hub
