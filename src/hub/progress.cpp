// Terminal bars and plain-line progress for downloads (see progress.h).
#include "hub/progress.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "hub/format.h"

namespace hearth::hub {
namespace {

std::string bar(std::uint64_t done, std::uint64_t total, int width) {
  int filled = total == 0 ? width : static_cast<int>(width * std::min(1.0, double(done) / total));
  return std::string(filled, '#') + std::string(width - filled, '-');
}

std::string short_name(const std::string& path, size_t width) {
  if (path.size() <= width) return path + std::string(width - path.size(), ' ');
  return "..." + path.substr(path.size() - (width - 3));
}

class LineProgress : public DownloadProgress {
 public:
  explicit LineProgress(std::FILE* out) : out_(out) {}
  void begin(const std::string& title, std::uint64_t total, int files) override {
    std::lock_guard lock(mu_);
    std::fprintf(out_, "%s: %d files, %s\n", title.c_str(), files, format_bytes(total).c_str());
    std::fflush(out_);
  }
  void file_started(const std::string& path, std::uint64_t size, std::uint64_t from) override {
    std::lock_guard lock(mu_);
    if (from > 0) {
      std::fprintf(out_, "resuming %s at %s of %s\n", path.c_str(), format_bytes(from).c_str(),
                   format_bytes(size).c_str());
      std::fflush(out_);
    }
  }
  void file_bytes(const std::string&, std::uint64_t) override {}
  void file_finished(const std::string& path, const Status& status) override {
    std::lock_guard lock(mu_);
    if (status.ok()) {
      std::fprintf(out_, "downloaded %s\n", path.c_str());
    } else {
      std::fprintf(out_, "failed %s: %s\n", path.c_str(), status.message().c_str());
    }
    std::fflush(out_);
  }
  void end() override {}

 private:
  std::mutex mu_;
  std::FILE* out_;
};

class TerminalProgress : public DownloadProgress {
 public:
  explicit TerminalProgress(std::FILE* out) : out_(out) {}
  void begin(const std::string& title, std::uint64_t total, int files) override {
    std::lock_guard lock(mu_);
    total_ = total;
    std::fprintf(out_, "%s: %d files, %s\n", title.c_str(), files, format_bytes(total).c_str());
  }
  void file_started(const std::string& path, std::uint64_t size, std::uint64_t from) override {
    std::lock_guard lock(mu_);
    active_[path] = {from, size};
    redraw(true);
  }
  void file_bytes(const std::string& path, std::uint64_t done) override {
    std::lock_guard lock(mu_);
    auto it = active_.find(path);
    if (it == active_.end()) return;
    it->second.done = done;
    redraw(false);
  }
  void file_finished(const std::string& path, const Status& status) override {
    std::lock_guard lock(mu_);
    auto it = active_.find(path);
    if (it != active_.end()) {
      finished_bytes_ += status.ok() ? it->second.size : it->second.done;
      active_.erase(it);
    }
    clear();
    if (status.ok()) {
      std::fprintf(out_, "downloaded %s\n", path.c_str());
    } else {
      std::fprintf(out_, "failed %s: %s\n", path.c_str(), status.message().c_str());
    }
    redraw(true);
  }
  void end() override {
    std::lock_guard lock(mu_);
    clear();
    std::fflush(out_);
  }

 private:
  struct Active {
    std::uint64_t done = 0;
    std::uint64_t size = 0;
  };

  // Erases the bars drawn last time (the cursor sits below them).
  void clear() {
    for (int i = 0; i < drawn_; ++i) std::fputs("\x1b[1A\x1b[2K", out_);
    drawn_ = 0;
  }

  void redraw(bool force) {
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    clear();
    std::uint64_t done = finished_bytes_;
    for (const auto& [path, a] : active_) {
      done += a.done;
      std::fprintf(out_, "  %s [%s] %s / %s\n", short_name(path, 36).c_str(),
                   bar(a.done, a.size, 24).c_str(), format_bytes(a.done).c_str(),
                   format_bytes(a.size).c_str());
      ++drawn_;
    }
    std::fprintf(out_, "  %-36s [%s] %s / %s\n", "total", bar(done, total_, 24).c_str(),
                 format_bytes(done).c_str(), format_bytes(total_).c_str());
    ++drawn_;
    std::fflush(out_);
  }

  std::mutex mu_;
  std::FILE* out_;
  std::map<std::string, Active> active_;
  std::uint64_t total_ = 0;
  std::uint64_t finished_bytes_ = 0;
  int drawn_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace

std::unique_ptr<DownloadProgress> make_download_progress(bool terminal, std::FILE* out) {
  if (terminal) return std::make_unique<TerminalProgress>(out);
  return std::make_unique<LineProgress>(out);
}

}  // namespace hearth::hub
