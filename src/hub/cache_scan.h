// What the HF cache holds: each models--org--name repo with its snapshots (newest first),
// the refs naming them and their size on disk. Read-only; used by ls, gc and resolution.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::hub {

struct CachedSnapshot {
  std::string commit;
  std::filesystem::path dir;
  std::vector<std::string> refs;  // revisions whose refs/ file names this commit
  std::filesystem::file_time_type modified;
  std::set<std::filesystem::path> blobs;  // blob files its links resolve to
  std::uint64_t bytes = 0;                // size of those blobs (plus plain files)
  int files = 0;
};

struct CachedRepo {
  std::string repo_id;
  std::filesystem::path dir;
  std::vector<CachedSnapshot> snapshots;  // newest first
};

// Every model repo under the cache root (a missing root is an empty cache).
Result<std::vector<CachedRepo>> scan_cache(const std::filesystem::path& cache_root);

// The snapshot a plain reference to the repo means: refs/main's, else the newest.
const CachedSnapshot* current_snapshot(const CachedRepo& repo);

}  // namespace hearth::hub
