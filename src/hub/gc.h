// `hearth gc`: reclaim disk in the HF cache. A snapshot is superseded when its repo has a
// ref naming a newer snapshot and no ref names it; a blob is dead when no remaining
// snapshot links to it. Partial downloads (*.incomplete) are kept: `get` resumes them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::hub {

struct GcItem {
  std::string repo_id;
  std::filesystem::path path;
  std::uint64_t bytes = 0;
  std::string why;
};

struct GcPlan {
  std::vector<GcItem> snapshots;
  std::vector<GcItem> blobs;
  std::uint64_t bytes() const;
  bool empty() const { return snapshots.empty() && blobs.empty(); }
};

Result<GcPlan> plan_gc(const std::filesystem::path& cache_root);
// Deletes what the plan names (snapshots first, then blobs).
Status execute_gc(const GcPlan& plan);

}  // namespace hearth::hub
