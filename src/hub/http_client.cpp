// libcurl transfers for the Hub client. One easy handle per HttpClient (one per download
// worker thread), so connections to the Hub and the CDN are reused between files.
#include "hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>

namespace hearth::hub {
namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string trim(std::string_view text) {
  size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(b, e - b + 1));
}

bool transient_curl_error(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

bool retryable_status(long status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

}  // namespace

// State shared with curl's callbacks during one request.
struct HttpClient::Transfer {
  const std::filesystem::path* path = nullptr;  // null: body to memory
  const ByteProgress* progress = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  CURL* curl = nullptr;
  std::uint64_t offset = 0;  // bytes already in the file when the attempt began
  std::FILE* file = nullptr;
  bool body_to_file = false;
  bool decided = false;  // whether the first body byte chose file or memory
  Status write_status;
  std::vector<Headers> headers;  // one map per response in the redirect chain
  std::string body;

  ~Transfer() { close_file(); }
  void close_file() {
    if (file != nullptr) std::fclose(file);
    file = nullptr;
  }

  // Chooses where the body goes once the status of the final response is known.
  bool decide() {
    decided = true;
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (path == nullptr || (status != 200 && status != 206)) return true;
    if (status == 206 && !headers.empty()) {
      // "bytes <start>-<end>/<total>": append only where the server really starts.
      auto it = headers.back().find("content-range");
      unsigned long long start = 0;
      if (it == headers.back().end() ||
          std::sscanf(it->second.c_str(), "bytes %llu-", &start) != 1 || start != offset) {
        write_status = io_error("the server answered a Range request at the wrong offset");
        return false;
      }
    }
    file = std::fopen(path->c_str(), status == 206 ? "ab" : "wb");
    if (file == nullptr) {
      write_status =
          io_error("{}: cannot open for writing: {}", path->string(), std::strerror(errno));
      return false;
    }
    if (status == 200) offset = 0;
    body_to_file = true;
    return true;
  }

  static size_t on_body(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    size_t bytes = size * count;
    if (!t->decided && !t->decide()) return 0;
    if (t->body_to_file) {
      if (std::fwrite(data, 1, bytes, t->file) != bytes) {
        t->write_status = io_error("{}: write failed: {}", t->path->string(), std::strerror(errno));
        return 0;
      }
    } else if (t->body.size() < kMaxErrorBody || t->path == nullptr) {
      t->body.append(data, bytes);
    }
    return bytes;
  }

  static size_t on_header(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string_view line(data, size * count);
    if (line.substr(0, 5) == "HTTP/") {
      t->headers.emplace_back();
    } else if (auto colon = line.find(':');
               colon != std::string_view::npos && !t->headers.empty()) {
      t->headers.back()[lower(std::string(line.substr(0, colon)))] = trim(line.substr(colon + 1));
    }
    return size * count;
  }

  static int on_progress(void* user, curl_off_t, curl_off_t now, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(user);
    if (t->cancel != nullptr && t->cancel->load()) return 1;
    if (t->body_to_file && t->progress != nullptr && *t->progress) {
      (*t->progress)(t->offset + static_cast<std::uint64_t>(now));
    }
    return 0;
  }
};

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {
  curl_ = curl_easy_init();
}

HttpClient::~HttpClient() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

Result<HttpResponse> HttpClient::get(const std::string& url) { return run(url, nullptr, nullptr); }

Result<HttpResponse> HttpClient::download(const std::string& url, const std::filesystem::path& path,
                                          const ByteProgress& progress) {
  return run(url, &path, &progress);
}

Status HttpClient::sleep_unless_cancelled(double seconds) const {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (options_.cancel != nullptr && options_.cancel->load()) return cancelled_error("cancelled");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ok_status();
}

Result<HttpResponse> HttpClient::run(const std::string& url, const std::filesystem::path* path,
                                     const ByteProgress* progress) {
  if (curl_ == nullptr) return internal_error("curl_easy_init failed");
  HttpResponse response;
  double backoff = options_.backoff_base_s;
  for (int attempt_no = 1;; ++attempt_no) {
    Transfer transfer;
    transfer.path = path;
    transfer.progress = progress;
    transfer.cancel = options_.cancel;
    transfer.curl = static_cast<CURL*>(curl_);
    bool retryable = false;
    double retry_after = -1;
    response = HttpResponse();
    response.attempts = attempt_no;
    Status st = attempt(transfer, url, response, retryable, retry_after);
    if (!retryable) {
      if (!st.ok()) return st;
      return response;
    }
    if (attempt_no >= options_.max_attempts) {
      std::string why = st.ok() ? fmt::format("HTTP {}", response.status) : st.message();
      return unavailable_error("GET {} failed after {} attempts: {}", url, attempt_no, why);
    }
    double wait = std::min(backoff, options_.backoff_max_s);
    if (retry_after >= 0) {
      if (retry_after > options_.retry_after_max_s) {
        return unavailable_error("GET {}: rate limited, the server asks to retry in {:.0f} s", url,
                                 retry_after);
      }
      wait = retry_after;
    }
    backoff *= 2;
    spdlog::debug("GET {}: {}; retrying in {:.1f} s", url,
                  st.ok() ? fmt::format("HTTP {}", response.status) : st.message(), wait);
    HEARTH_RETURN_IF_ERROR(sleep_unless_cancelled(wait));
  }
}

Status HttpClient::attempt(Transfer& transfer, const std::string& url, HttpResponse& response,
                           bool& retryable, double& retry_after_s) {
  CURL* curl = transfer.curl;
  curl_easy_reset(curl);
  if (transfer.path != nullptr) {
    std::error_code ec;
    auto size = std::filesystem::file_size(*transfer.path, ec);
    transfer.offset = ec ? 0 : size;
  }
  curl_slist* headers = nullptr;
  if (!options_.token.empty()) {
    headers = curl_slist_append(headers, ("Authorization: Bearer " + options_.token).c_str());
  }
  std::string range;
  if (transfer.offset > 0) range = fmt::format("{}-", transfer.offset);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_UNRESTRICTED_AUTH, 0L);  // no token to the CDN host
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "hearth");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);  // stalled 60 s -> timeout, retried
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
  if (!range.empty()) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Transfer::on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &Transfer::on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);

  CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  if (code == CURLE_OK && !transfer.decided) transfer.decide();  // an empty body
  transfer.close_file();
  if (!transfer.headers.empty()) {
    response.first_headers = transfer.headers.front();
    response.last_headers = transfer.headers.back();
  }
  response.body = std::move(transfer.body);

  retryable = false;
  if (code == CURLE_ABORTED_BY_CALLBACK) return cancelled_error("cancelled");
  if (code == CURLE_WRITE_ERROR && !transfer.write_status.ok()) {
    // A Range answered at the wrong offset is retried from scratch; a disk error is not.
    if (transfer.path != nullptr && transfer.write_status.code() == ErrorCode::kIo &&
        transfer.write_status.message().find("wrong offset") != std::string::npos) {
      std::error_code ec;
      std::filesystem::remove(*transfer.path, ec);
      retryable = true;
    }
    return transfer.write_status;
  }
  if (code != CURLE_OK) {
    retryable = transient_curl_error(code);
    return unavailable_error("GET {}: {}", url, curl_easy_strerror(code));
  }
  if (retryable_status(response.status)) {
    retryable = true;
    auto it = response.last_headers.find("retry-after");
    if (it != response.last_headers.end()) {
      char* end = nullptr;
      double seconds = std::strtod(it->second.c_str(), &end);
      if (end != it->second.c_str() && seconds >= 0) retry_after_s = seconds;
    }
  }
  return ok_status();
}

std::string url_encode_segment(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string url_encode_path(std::string_view path) {
  std::string out;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    out += url_encode_segment(path.substr(start, slash - start));
    if (slash == std::string_view::npos) break;
    out += '/';
    start = slash + 1;
  }
  return out;
}

}  // namespace hearth::hub
