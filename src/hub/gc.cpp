// Cache garbage collection (see gc.h).
#include "hub/gc.h"

#include <set>

#include "hub/cache_scan.h"

namespace hearth::hub {

namespace fs = std::filesystem;

std::uint64_t GcPlan::bytes() const {
  std::uint64_t total = 0;
  for (const auto& b : blobs) total += b.bytes;
  return total;
}

Result<GcPlan> plan_gc(const fs::path& cache_root) {
  HEARTH_ASSIGN_OR_RETURN(auto repos, scan_cache(cache_root));
  GcPlan plan;
  for (const auto& repo : repos) {
    // The newest snapshot some ref names; older unnamed snapshots are superseded. Newer
    // unnamed ones are kept: they may be a get in progress (refs move last).
    const CachedSnapshot* newest_ref = nullptr;
    for (const auto& snap : repo.snapshots) {
      if (!snap.refs.empty() && (newest_ref == nullptr || snap.modified > newest_ref->modified)) {
        newest_ref = &snap;
      }
    }
    std::set<fs::path> live;
    for (const auto& snap : repo.snapshots) {
      bool superseded =
          newest_ref != nullptr && snap.refs.empty() && snap.modified < newest_ref->modified;
      if (superseded) {
        plan.snapshots.push_back({repo.repo_id, snap.dir, 0,
                                  fmt::format("superseded by {} ({})", newest_ref->refs.front(),
                                              newest_ref->commit.substr(0, 12))});
      } else {
        live.insert(snap.blobs.begin(), snap.blobs.end());
      }
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(repo.dir / "blobs", ec)) {
      if (!entry.is_regular_file() || entry.path().extension() == ".incomplete") continue;
      fs::path blob = fs::weakly_canonical(entry.path(), ec);
      if (live.contains(blob)) continue;
      plan.blobs.push_back({repo.repo_id, entry.path(), fs::file_size(entry.path(), ec),
                            "no remaining snapshot links to it"});
    }
  }
  return plan;
}

Status execute_gc(const GcPlan& plan) {
  std::error_code ec;
  for (const auto& item : plan.snapshots) {
    fs::remove_all(item.path, ec);
    if (ec) return io_error("removing {}: {}", item.path.string(), ec.message());
  }
  for (const auto& item : plan.blobs) {
    fs::remove(item.path, ec);
    if (ec) return io_error("removing {}: {}", item.path.string(), ec.message());
  }
  return ok_status();
}

}  // namespace hearth::hub
