// A small libcurl client for the Hub: GET into memory or into a file with Range resume,
// redirects (the CDN), a Bearer token that is not forwarded to other hosts, retries
// with backoff on 429/5xx and dropped connections (honoring Retry-After), cancellation.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::hub {

using Headers = std::map<std::string, std::string>;  // names lower-cased

struct HttpOptions {
  std::string token;            // sent as "Authorization: Bearer <token>" to the first host only
  int max_attempts = 6;         // per request, counting the first
  double backoff_base_s = 0.5;  // doubles after each failed attempt
  double backoff_max_s = 16;
  double retry_after_max_s = 120;             // a longer Retry-After is an error, not a wait
  const std::atomic<bool>* cancel = nullptr;  // set -> the transfer stops with kCancelled
};

struct HttpResponse {
  long status = 0;
  Headers first_headers;  // the first response's (the Hub's, before redirects)
  Headers last_headers;   // the final response's (the CDN's, after redirects)
  std::string body;       // the body; for download() only an error body
  int attempts = 0;       // requests made, retries included
};

// Bytes of the target file present so far (a resumed prefix included).
using ByteProgress = std::function<void(std::uint64_t done)>;

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  ~HttpClient();

  // GET into memory. Any final HTTP status is returned (the caller maps 4xx); network
  // failures and 429/5xx that outlast the retries are kUnavailable.
  Result<HttpResponse> get(const std::string& url);

  // GET into `path`, appending from its current size with a Range request; a server that
  // ignores the range restarts the file. Status 200/206 means the file holds the whole
  // body; 416 means the file was already at least as long as the body.
  Result<HttpResponse> download(const std::string& url, const std::filesystem::path& path,
                                const ByteProgress& progress);

  const HttpOptions& options() const { return options_; }

 private:
  struct Transfer;
  Result<HttpResponse> run(const std::string& url, const std::filesystem::path* path,
                           const ByteProgress* progress);
  Status attempt(Transfer& transfer, const std::string& url, HttpResponse& response,
                 bool& retryable, double& retry_after_s);
  Status sleep_unless_cancelled(double seconds) const;

  HttpOptions options_;
  void* curl_ = nullptr;  // CURL*, one easy handle reused across requests (keeps connections)
};

// Percent-encodes one path segment (a revision such as "refs/pr/1" becomes "refs%2Fpr%2F1").
std::string url_encode_segment(std::string_view text);
// Percent-encodes a file path, keeping its '/' separators.
std::string url_encode_path(std::string_view path);

}  // namespace hearth::hub
