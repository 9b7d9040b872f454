// The download orchestration behind `hearth get` (see downloader.h). Files that share a
// blob (same etag) are fetched once. The ref is written last, so an interrupted get
// never points `main` at a snapshot with files missing.
#include "hub/downloader.h"

#include <map>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "hub/blob_verify.h"
#include "hub/cache_layout.h"
#include "hub/file_filter.h"
#include "hub/hub_api.h"

namespace hearth::hub {
namespace {

// One blob to fetch and every snapshot path that links to it.
struct BlobJob {
  const RepoFile* file = nullptr;  // the first file with this etag (size, hashes)
  std::vector<const RepoFile*> paths;
};

class NullProgress : public DownloadProgress {
 public:
  void begin(const std::string&, std::uint64_t, int) override {}
  void file_started(const std::string&, std::uint64_t, std::uint64_t) override {}
  void file_bytes(const std::string&, std::uint64_t) override {}
  void file_finished(const std::string&, const Status&) override {}
  void end() override {}
};

Status link_all(const RepoCache& cache, const std::string& commit, const BlobJob& job) {
  for (const RepoFile* f : job.paths) {
    HEARTH_RETURN_IF_ERROR(cache.link_snapshot_file(commit, f->path, f->etag()));
  }
  return ok_status();
}

// Fetches one blob into blobs/<etag>.incomplete, verifies it and moves it into place.
Status fetch_blob(HttpClient& http, const HubConfig& config, const RepoCache& cache,
                  const RepoInfo& info, const BlobJob& job, DownloadProgress& progress) {
  const RepoFile& file = *job.file;
  std::filesystem::path partial = cache.incomplete_path(file.etag());
  std::error_code ec;
  std::uint64_t resumed =
      std::filesystem::exists(partial, ec) ? std::filesystem::file_size(partial, ec) : 0;
  progress.file_started(file.path, file.size, resumed);
  std::string url = resolve_url(config.endpoint, info.repo_id, info.commit, file.path);
  auto response = http.download(url, partial,
                                [&](std::uint64_t done) { progress.file_bytes(file.path, done); });
  if (!response.ok()) return response.status().with_context(file.path);
  if (response->status != 200 && response->status != 206 && response->status != 416) {
    return hub_http_error(*response, info.repo_id, info.commit, !config.token.empty())
        .with_context(file.path);
  }
  std::string etag = normalize_etag(response->first_headers);
  if (!etag.empty() && etag != file.etag()) {
    std::filesystem::remove(partial, ec);
    return parse_error("{}: the Hub serves etag {} but listed {}; run get again", file.path, etag,
                       file.etag());
  }
  if (Status st = verify_blob(partial, file); !st.ok()) {
    std::filesystem::remove(partial, ec);  // bad bytes are never kept
    return st;
  }
  std::filesystem::rename(partial, cache.blob_path(file.etag()), ec);
  if (ec) return io_error("{}: moving the finished blob: {}", file.path, ec.message());
  return link_all(cache, info.commit, job);
}

}  // namespace

Result<GetResult> get_repo(const HubConfig& config, const GetOptions& options) {
  HEARTH_RETURN_IF_ERROR(validate_repo_id(options.repo_id));
  NullProgress null_progress;
  DownloadProgress& progress = options.progress ? *options.progress : null_progress;
  HttpOptions http_options;
  http_options.token = config.token;
  http_options.cancel = options.cancel;
  http_options.max_attempts = options.retries + 1;
  HttpClient api(http_options);
  HEARTH_ASSIGN_OR_RETURN(RepoInfo info,
                          fetch_repo_info(api, config.endpoint, options.repo_id, options.revision));

  RepoCache cache(config.cache_dir, options.repo_id);
  GetResult result;
  result.commit = info.commit;
  result.snapshot_dir = cache.snapshot_dir(info.commit);

  std::map<std::string, BlobJob> by_etag;
  for (const RepoFile& f : info.files) {
    if (!keep_file(f.path, options.include, options.exclude)) continue;
    BlobJob& job = by_etag[f.etag()];
    if (job.file == nullptr) job.file = &f;
    job.paths.push_back(&f);
    ++result.files;
    result.bytes_total += f.size;
  }
  if (result.files == 0) {
    return not_found_error(
        "{}@{}: no file matches the --include / --exclude patterns ({} files "
        "in the repo)",
        options.repo_id, options.revision, info.files.size());
  }
  std::error_code ec;
  std::filesystem::create_directories(cache.dir() / "blobs", ec);
  std::filesystem::create_directories(result.snapshot_dir, ec);
  if (ec) return io_error("creating {}: {}", result.snapshot_dir.string(), ec.message());

  std::vector<const BlobJob*> pending;
  for (const auto& [etag, job] : by_etag) {
    if (std::filesystem::is_regular_file(cache.blob_path(etag), ec)) {
      HEARTH_RETURN_IF_ERROR(link_all(cache, info.commit, job));
      result.reused += static_cast<int>(job.paths.size());
    } else {
      pending.push_back(&job);
    }
  }

  std::uint64_t pending_bytes = 0;
  for (const BlobJob* job : pending) pending_bytes += job->file->size;
  if (!pending.empty()) {
    progress.begin(fmt::format("{}@{}", options.repo_id, info.commit.substr(0, 12)), pending_bytes,
                   static_cast<int>(pending.size()));
  }

  std::mutex mu;
  size_t next = 0;
  std::vector<Status> errors;
  int workers = std::max(1, std::min<int>(options.parallel, static_cast<int>(pending.size())));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers && !pending.empty(); ++w) {
    threads.emplace_back([&] {
      HttpClient http(http_options);
      while (true) {
        const BlobJob* job = nullptr;
        {
          std::lock_guard lock(mu);
          if (next >= pending.size() || !errors.empty()) return;
          if (options.cancel != nullptr && options.cancel->load()) return;
          job = pending[next++];
        }
        Status st = fetch_blob(http, config, cache, info, *job, progress);
        progress.file_finished(job->file->path, st);
        std::lock_guard lock(mu);
        if (st.ok()) {
          result.downloaded += static_cast<int>(job->paths.size());
        } else {
          errors.push_back(st);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  progress.end();

  if (options.cancel != nullptr && options.cancel->load()) {
    return cancelled_error("interrupted; partial files are kept, run the same get to resume");
  }
  if (!errors.empty()) {
    // A cancelled transfer is not the cause; report the first real failure.
    for (const Status& st : errors) {
      if (st.code() != ErrorCode::kCancelled) return st;
    }
    return errors.front();
  }
  if (options.revision != info.commit) {
    HEARTH_RETURN_IF_ERROR(cache.write_ref(options.revision, info.commit));
  }
  return result;
}

}  // namespace hearth::hub
