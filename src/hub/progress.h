// Download progress: bars redrawn in place on a terminal, one plain line per file when
// the output is a pipe or a file. Called from several download threads at once.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "base/status.h"

namespace hearth::hub {

class DownloadProgress {
 public:
  virtual ~DownloadProgress() = default;
  virtual void begin(const std::string& title, std::uint64_t total_bytes, int files) = 0;
  virtual void file_started(const std::string& path, std::uint64_t size,
                            std::uint64_t resumed_from) = 0;
  virtual void file_bytes(const std::string& path, std::uint64_t done) = 0;
  virtual void file_finished(const std::string& path, const Status& status) = 0;
  virtual void end() = 0;
};

// terminal: redraw bars with ANSI escapes; otherwise plain lines. Writes to `out`.
std::unique_ptr<DownloadProgress> make_download_progress(bool terminal, std::FILE* out);

}  // namespace hearth::hub
