// Model resolution (see resolve.h).
#include "hub/resolve.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "hub/cache_layout.h"
#include "hub/cache_scan.h"

namespace hearth::hub {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Query words: split on spaces, '-', '_', '/'.
std::vector<std::string> words(std::string_view query) {
  std::vector<std::string> out;
  std::string current;
  for (char c : lower(query)) {
    if (c == ' ' || c == '-' || c == '_' || c == '/') {
      if (!current.empty()) out.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) out.push_back(current);
  return out;
}

ResolvedModel from_snapshot(const CachedRepo& repo, const CachedSnapshot& snap) {
  return {snap.dir, repo.repo_id, snap.commit, "cache"};
}

Result<ResolvedModel> exact_repo(const std::vector<CachedRepo>& repos, std::string_view repo_id,
                                 std::string_view revision) {
  for (const auto& repo : repos) {
    if (lower(repo.repo_id) != lower(repo_id)) continue;
    if (revision.empty()) {
      if (const CachedSnapshot* snap = current_snapshot(repo)) return from_snapshot(repo, *snap);
      break;
    }
    for (const auto& snap : repo.snapshots) {
      bool named = std::find(snap.refs.begin(), snap.refs.end(), revision) != snap.refs.end();
      if (named || (revision.size() >= 7 && snap.commit.starts_with(revision))) {
        return from_snapshot(repo, snap);
      }
    }
    return not_found_error(
        "{} has no downloaded revision '{}'; get it with: hearth get {} "
        "--revision {}",
        repo_id, revision, repo_id, revision);
  }
  return not_found_error("model {} is not downloaded; get it with: hearth get {}", repo_id,
                         repo_id);
}

}  // namespace

Result<ResolvedModel> resolve_model(std::string_view query, const fs::path& cache_root) {
  if (query.empty()) return invalid_argument_error("empty model name");
  std::error_code ec;
  fs::path as_path(query);
  if (fs::is_directory(as_path, ec)) {
    if (!fs::exists(as_path / "config.json", ec)) {
      return not_found_error("{} is a folder without config.json, not a model directory",
                             std::string(query));
    }
    return ResolvedModel{fs::absolute(as_path), "", "", "path"};
  }
  if (query.starts_with("/") || query.starts_with("./") || query.starts_with("../") ||
      query.starts_with("~")) {
    return not_found_error("no model directory at {}", std::string(query));
  }
  HEARTH_ASSIGN_OR_RETURN(auto repos, scan_cache(cache_root));
  std::string_view id = query;
  std::string_view revision;
  if (auto at = query.find('@'); at != std::string_view::npos) {
    id = query.substr(0, at);
    revision = query.substr(at + 1);
  }
  if (id.find('/') != std::string_view::npos) {
    HEARTH_RETURN_IF_ERROR(validate_repo_id(id));
    return exact_repo(repos, id, revision);
  }
  // Fuzzy: every query word appears in the repo id; a repo whose name equals the query wins.
  std::vector<const CachedRepo*> matches;
  for (const auto& repo : repos) {
    if (current_snapshot(repo) == nullptr) continue;
    std::string name = lower(repo.repo_id.substr(repo.repo_id.find('/') + 1));
    if (name == lower(id)) {
      matches = {&repo};
      break;
    }
    std::string hay = lower(repo.repo_id);
    bool all = true;
    for (const auto& w : words(id)) all = all && hay.find(w) != std::string::npos;
    if (all) matches.push_back(&repo);
  }
  if (matches.size() == 1) {
    return exact_repo(repos, matches[0]->repo_id, revision);
  }
  if (matches.empty()) {
    std::string have;
    for (const auto& repo : repos) have += "\n  " + repo.repo_id;
    return not_found_error(
        "no downloaded model matches '{}'{}; download one with: hearth get "
        "<org/name>",
        std::string(query),
        have.empty() ? std::string(" (none are downloaded)") : " (downloaded:" + have + ")");
  }
  std::string list;
  for (const auto* repo : matches) list += "\n  " + repo->repo_id;
  return invalid_argument_error("'{}' matches {} downloaded models; name one:{}",
                                std::string(query), matches.size(), list);
}

Result<fs::path> starter_model_dir() {
  if (const char* env = std::getenv("HEARTH_STARTER_DIR"); env != nullptr && *env != '\0') {
    if (fs::exists(fs::path(env) / "config.json")) return fs::path(env);
    return not_found_error("HEARTH_STARTER_DIR={} holds no config.json", env);
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return not_found_error("cannot locate the hearth executable: {}", ec.message());
  for (const fs::path& candidate : {exe.parent_path() / "../../models/starter",
                                    exe.parent_path() / "../share/hearth/models/starter"}) {
    if (fs::exists(candidate / "config.json", ec)) return fs::weakly_canonical(candidate, ec);
  }
  return not_found_error("no starter model next to {} (set HEARTH_STARTER_DIR)", exe.string());
}

Result<ResolvedModel> default_model(const fs::path& cache_root) {
  HEARTH_ASSIGN_OR_RETURN(auto repos, scan_cache(cache_root));
  const CachedRepo* newest_repo = nullptr;
  const CachedSnapshot* newest = nullptr;
  std::error_code ec;
  for (const auto& repo : repos) {
    const CachedSnapshot* snap = current_snapshot(repo);
    if (snap == nullptr || !fs::exists(snap->dir / "config.json", ec)) continue;
    if (newest == nullptr || snap->modified > newest->modified) {
      newest = snap;
      newest_repo = &repo;
    }
  }
  if (newest != nullptr) return from_snapshot(*newest_repo, *newest);
  HEARTH_ASSIGN_OR_RETURN(fs::path starter, starter_model_dir());
  return ResolvedModel{starter, "", "", "starter"};
}

}  // namespace hearth::hub
