// Scanning the HF cache (see cache_scan.h).
#include "hub/cache_scan.h"

#include <algorithm>

#include "hub/cache_layout.h"

namespace hearth::hub {

namespace fs = std::filesystem;

namespace {

void scan_snapshot(CachedSnapshot& snap) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(snap.dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2)) continue;
    fs::path target = fs::weakly_canonical(it->path(), e2);
    if (e2 || !fs::is_regular_file(target, e2)) continue;  // a dangling link
    ++snap.files;
    if (snap.blobs.insert(target).second) snap.bytes += fs::file_size(target, e2);
  }
}

}  // namespace

Result<std::vector<CachedRepo>> scan_cache(const fs::path& cache_root) {
  std::vector<CachedRepo> repos;
  std::error_code ec;
  if (!fs::is_directory(cache_root, ec)) return repos;
  for (const auto& entry : fs::directory_iterator(cache_root, ec)) {
    auto repo_id = repo_id_from_folder(entry.path().filename().string());
    if (!repo_id || !entry.is_directory()) continue;
    CachedRepo repo;
    repo.repo_id = *repo_id;
    repo.dir = entry.path();
    RepoCache layout(cache_root, *repo_id);
    std::vector<std::pair<std::string, std::string>> refs;  // revision, commit
    fs::path refs_dir = repo.dir / "refs";
    std::error_code e2;
    for (auto it = fs::recursive_directory_iterator(refs_dir, e2);
         !e2 && it != fs::recursive_directory_iterator(); it.increment(e2)) {
      if (!it->is_regular_file()) continue;
      std::string revision = fs::relative(it->path(), refs_dir).string();
      if (auto commit = layout.read_ref(revision)) refs.emplace_back(revision, *commit);
    }
    for (const auto& snap_entry : fs::directory_iterator(repo.dir / "snapshots", e2)) {
      if (!snap_entry.is_directory()) continue;
      CachedSnapshot snap;
      snap.commit = snap_entry.path().filename().string();
      snap.dir = snap_entry.path();
      snap.modified = fs::last_write_time(snap.dir, e2);
      for (const auto& [revision, commit] : refs) {
        if (commit == snap.commit) snap.refs.push_back(revision);
      }
      scan_snapshot(snap);
      repo.snapshots.push_back(std::move(snap));
    }
    std::sort(repo.snapshots.begin(), repo.snapshots.end(),
              [](const auto& a, const auto& b) { return a.modified > b.modified; });
    repos.push_back(std::move(repo));
  }
  std::sort(repos.begin(), repos.end(),
            [](const auto& a, const auto& b) { return a.repo_id < b.repo_id; });
  return repos;
}

const CachedSnapshot* current_snapshot(const CachedRepo& repo) {
  for (const auto& snap : repo.snapshots) {
    if (std::find(snap.refs.begin(), snap.refs.end(), "main") != snap.refs.end()) return &snap;
  }
  return repo.snapshots.empty() ? nullptr : &repo.snapshots.front();
}

}  // namespace hearth::hub
