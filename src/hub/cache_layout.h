// The HuggingFace cache layout of one repo: models--org--name/{blobs,snapshots,refs}.
// Blobs are named by etag (git sha1 or LFS sha256); a snapshot is a tree of relative
// symlinks into blobs/; refs/<revision> holds the commit a branch or tag pointed to.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace hearth::hub {

namespace fs = std::filesystem;

// "org/name" -> "models--org--name".
std::string repo_folder_name(std::string_view repo_id);
// "models--org--name" -> "org/name"; nullopt for folders that are not model repos.
std::optional<std::string> repo_id_from_folder(std::string_view folder);

// A repo id is "name" or "org/name" of [A-Za-z0-9._-], without "--" or "..".
Status validate_repo_id(std::string_view repo_id);
// A repo file path is relative and never leaves the snapshot ("a/b.json", not "../x").
Status validate_repo_file_path(std::string_view path);
bool is_commit_hash(std::string_view text);  // 40 lowercase hex digits

class RepoCache {
 public:
  RepoCache(fs::path cache_root, std::string_view repo_id);

  const fs::path& dir() const { return dir_; }
  fs::path blob_path(std::string_view etag) const;
  fs::path incomplete_path(std::string_view etag) const;  // blobs/<etag>.incomplete
  fs::path snapshot_dir(std::string_view commit) const;
  fs::path snapshot_file(std::string_view commit, std::string_view file) const;
  fs::path ref_path(std::string_view revision) const;

  // The commit refs/<revision> names, or nullopt when there is no such ref.
  std::optional<std::string> read_ref(std::string_view revision) const;
  Status write_ref(std::string_view revision, std::string_view commit) const;

  // snapshots/<commit>/<file> -> ../../blobs/<etag> (one more ../ per folder level).
  Status link_snapshot_file(std::string_view commit, std::string_view file,
                            std::string_view etag) const;
  // True when the snapshot entry exists and resolves to a complete blob.
  bool has_snapshot_file(std::string_view commit, std::string_view file) const;

 private:
  fs::path dir_;
};

}  // namespace hearth::hub
