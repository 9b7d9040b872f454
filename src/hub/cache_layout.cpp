// Paths, refs and snapshot links of the HF cache layout (huggingface_hub's format, so a
// model hearth downloads is found by transformers and the other way round).
#include "hub/cache_layout.h"

#include <fstream>
#include <system_error>

#include "base/mapped_file.h"

namespace hearth::hub {

std::string repo_folder_name(std::string_view repo_id) {
  std::string name = "models--";
  for (char c : repo_id) {
    if (c == '/') {
      name += "--";
    } else {
      name += c;
    }
  }
  return name;
}

std::optional<std::string> repo_id_from_folder(std::string_view folder) {
  constexpr std::string_view kPrefix = "models--";
  if (folder.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view rest = folder.substr(kPrefix.size());
  if (rest.empty()) return std::nullopt;
  size_t pos = rest.find("--");
  if (pos == std::string_view::npos) return std::string(rest);
  return fmt::format("{}/{}", rest.substr(0, pos), rest.substr(pos + 2));
}

Status validate_repo_id(std::string_view repo_id) {
  auto bad = [&](std::string_view why) {
    return invalid_argument_error("'{}' is not a repo id ({}); expected org/name", repo_id, why);
  };
  if (repo_id.empty() || repo_id.size() > 96) return bad("length");
  size_t slash = repo_id.find('/');
  if (slash != std::string_view::npos && repo_id.find('/', slash + 1) != std::string_view::npos) {
    return bad("more than one '/'");
  }
  if (repo_id.front() == '/' || repo_id.back() == '/') return bad("empty org or name");
  for (char c : repo_id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '/';
    if (!ok) return bad(fmt::format("character '{}'", c));
  }
  if (repo_id.find("--") != std::string_view::npos ||
      repo_id.find("..") != std::string_view::npos) {
    return bad("'--' and '..' are not allowed");
  }
  return ok_status();
}

Status validate_repo_file_path(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') {
    return invalid_argument_error("unsafe file path '{}' in repo listing", path);
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return invalid_argument_error("unsafe file path '{}' in repo listing", path);
    }
    start = end + 1;
  }
  return ok_status();
}

bool is_commit_hash(std::string_view text) {
  if (text.size() != 40) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

RepoCache::RepoCache(fs::path cache_root, std::string_view repo_id)
    : dir_(std::move(cache_root) / repo_folder_name(repo_id)) {}

fs::path RepoCache::blob_path(std::string_view etag) const { return dir_ / "blobs" / etag; }

fs::path RepoCache::incomplete_path(std::string_view etag) const {
  return dir_ / "blobs" / (std::string(etag) + ".incomplete");
}

fs::path RepoCache::snapshot_dir(std::string_view commit) const {
  return dir_ / "snapshots" / commit;
}

fs::path RepoCache::snapshot_file(std::string_view commit, std::string_view file) const {
  return snapshot_dir(commit) / file;
}

fs::path RepoCache::ref_path(std::string_view revision) const { return dir_ / "refs" / revision; }

std::optional<std::string> RepoCache::read_ref(std::string_view revision) const {
  auto text = read_file(ref_path(revision).string());
  if (!text.ok()) return std::nullopt;
  std::string commit = *text;
  while (!commit.empty() && (commit.back() == '\n' || commit.back() == ' ')) commit.pop_back();
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

Status RepoCache::write_ref(std::string_view revision, std::string_view commit) const {
  fs::path path = ref_path(revision);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return io_error("creating {}: {}", path.parent_path().string(), ec.message());
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out) return io_error("writing {}", tmp.string());
  }
  fs::rename(tmp, path, ec);
  if (ec) return io_error("writing {}: {}", path.string(), ec.message());
  return ok_status();
}

Status RepoCache::link_snapshot_file(std::string_view commit, std::string_view file,
                                     std::string_view etag) const {
  fs::path link = snapshot_file(commit, file);
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) return io_error("creating {}: {}", link.parent_path().string(), ec.message());
  // From snapshots/<commit>/<dirs...>/<file>: up one level per folder, then commit and
  // snapshots, to reach the repo folder.
  std::string target;
  size_t depth = 0;
  for (char c : file) depth += c == '/' ? 1 : 0;
  for (size_t i = 0; i < depth + 2; ++i) target += "../";
  target += "blobs/";
  target += etag;
  fs::remove(link, ec);
  fs::create_symlink(target, link, ec);
  if (ec) return io_error("linking {}: {}", link.string(), ec.message());
  return ok_status();
}

bool RepoCache::has_snapshot_file(std::string_view commit, std::string_view file) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot_file(commit, file), ec);  // follows the link
}

}  // namespace hearth::hub
