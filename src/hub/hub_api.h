// The Hub's REST API as the downloader needs it: a repo's commit and file list at a
// revision (GET /api/models/{repo}/revision/{rev}?blobs=true), file URLs, and the
// mapping of HTTP errors to messages a user can act on (401/403 gated or private, 404).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "hub/http_client.h"

namespace hearth::hub {

struct RepoFile {
  std::string path;                       // "model-00001-of-00002.safetensors"
  std::uint64_t size = 0;                 // bytes of the real file (not the LFS pointer)
  std::string blob_id;                    // git blob sha1
  std::optional<std::string> lfs_sha256;  // set for LFS files
  // The cache's blob name: the LFS sha256, else the git blob sha1 (huggingface_hub's etag).
  const std::string& etag() const { return lfs_sha256 ? *lfs_sha256 : blob_id; }
};

struct RepoInfo {
  std::string repo_id;
  std::string commit;  // the 40-hex commit the revision resolved to
  std::vector<RepoFile> files;
};

Result<RepoInfo> fetch_repo_info(HttpClient& http, const std::string& endpoint,
                                 const std::string& repo_id, const std::string& revision);

// {endpoint}/{repo}/resolve/{commit}/{file}
std::string resolve_url(const std::string& endpoint, const std::string& repo_id,
                        const std::string& commit, const std::string& file);

// A non-2xx response as an actionable error: 401/403 (gated or private, token hints),
// 404 (no such repo, revision or file), anything else with the Hub's message.
Status hub_http_error(const HttpResponse& response, const std::string& repo_id,
                      const std::string& revision, bool have_token);

// The etag a Hub response names: X-Linked-Etag (LFS) else ETag, quotes and W/ removed.
std::string normalize_etag(const Headers& headers);

}  // namespace hearth::hub
