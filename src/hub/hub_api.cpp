// Hub API calls and error mapping (see hub_api.h).
#include "hub/hub_api.h"

#include <nlohmann/json.hpp>

#include "hub/cache_layout.h"

namespace hearth::hub {
namespace {

std::string header(const Headers& headers, const std::string& name) {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

// The Hub's own words for an error: X-Error-Message, else a JSON {"error": ...} body.
std::string hub_message(const HttpResponse& response) {
  std::string message = header(response.first_headers, "x-error-message");
  if (!message.empty()) return message;
  auto body = nlohmann::json::parse(response.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_string()) {
    return body["error"].get<std::string>();
  }
  return {};
}

}  // namespace

std::string resolve_url(const std::string& endpoint, const std::string& repo_id,
                        const std::string& commit, const std::string& file) {
  return fmt::format("{}/{}/resolve/{}/{}", endpoint, repo_id, url_encode_segment(commit),
                     url_encode_path(file));
}

std::string normalize_etag(const Headers& headers) {
  std::string etag = header(headers, "x-linked-etag");
  if (etag.empty()) etag = header(headers, "etag");
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

Status hub_http_error(const HttpResponse& response, const std::string& repo_id,
                      const std::string& revision, bool have_token) {
  std::string code = header(response.first_headers, "x-error-code");
  std::string said = hub_message(response);
  std::string hub_says = said.empty() ? std::string() : fmt::format(" (the Hub says: {})", said);
  long status = response.status;
  if (code == "GatedRepo" || (status == 403 && have_token)) {
    return permission_denied_error(
        "{} is gated or private: HTTP {}{}; accept its terms on the model page and set "
        "HF_TOKEN to a token of an account with access",
        repo_id, status, hub_says);
  }
  if (code == "RevisionNotFound") {
    return not_found_error("{} has no revision '{}'{}", repo_id, revision, hub_says);
  }
  if (code == "EntryNotFound") return not_found_error("{}: file not found{}", repo_id, hub_says);
  if (status == 401 || status == 403 || code == "RepoNotFound") {
    if (have_token) {
      return not_found_error("repository {} not found, or HF_TOKEN has no access to it: HTTP {}{}",
                             repo_id, status, hub_says);
    }
    return not_found_error(
        "repository {} not found, or it is private or gated: HTTP {}{}; if it exists, set "
        "HF_TOKEN to a token with access",
        repo_id, status, hub_says);
  }
  if (status == 404) {
    return not_found_error("{}: repository or revision '{}' not found (HTTP 404){}", repo_id,
                           revision, hub_says);
  }
  return unavailable_error("{}: the Hub answered HTTP {}{}", repo_id, status, hub_says);
}

Result<RepoInfo> fetch_repo_info(HttpClient& http, const std::string& endpoint,
                                 const std::string& repo_id, const std::string& revision) {
  std::string url = fmt::format("{}/api/models/{}/revision/{}?blobs=true", endpoint, repo_id,
                                url_encode_segment(revision));
  HEARTH_ASSIGN_OR_RETURN(HttpResponse response, http.get(url));
  if (response.status != 200) {
    return hub_http_error(response, repo_id, revision, !http.options().token.empty());
  }
  auto json = nlohmann::json::parse(response.body, nullptr, false);
  if (!json.is_object()) return parse_error("{}: the Hub's answer is not a JSON object", url);
  RepoInfo info;
  info.repo_id = repo_id;
  if (!json.contains("sha") || !json["sha"].is_string() ||
      !is_commit_hash(json["sha"].get<std::string>())) {
    return parse_error("{}: the Hub's answer has no commit 'sha'", url);
  }
  info.commit = json["sha"].get<std::string>();
  if (!json.contains("siblings") || !json["siblings"].is_array()) {
    return parse_error("{}: the Hub's answer has no 'siblings' file list", url);
  }
  for (const auto& sibling : json["siblings"]) {
    if (!sibling.is_object() || !sibling.contains("rfilename") ||
        !sibling["rfilename"].is_string()) {
      return parse_error("{}: a sibling without 'rfilename'", url);
    }
    RepoFile file;
    file.path = sibling["rfilename"].get<std::string>();
    HEARTH_RETURN_IF_ERROR(validate_repo_file_path(file.path));
    if (sibling.contains("size") && sibling["size"].is_number_unsigned()) {
      file.size = sibling["size"].get<std::uint64_t>();
    }
    if (sibling.contains("blobId") && sibling["blobId"].is_string()) {
      file.blob_id = sibling["blobId"].get<std::string>();
    }
    if (sibling.contains("lfs") && sibling["lfs"].is_object()) {
      const auto& lfs = sibling["lfs"];
      if (lfs.contains("sha256") && lfs["sha256"].is_string()) {
        file.lfs_sha256 = lfs["sha256"].get<std::string>();
      }
      if (lfs.contains("size") && lfs["size"].is_number_unsigned()) {
        file.size = lfs["size"].get<std::uint64_t>();
      }
    }
    // The etag names a blob file: it must be a plain hex name.
    const std::string& etag = file.etag();
    bool hex = !etag.empty() && etag.size() <= 64;
    for (char c : etag) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
    if (!hex) return parse_error("{}: file {} has no usable blob id", url, file.path);
    info.files.push_back(std::move(file));
  }
  return info;
}

}  // namespace hearth::hub
