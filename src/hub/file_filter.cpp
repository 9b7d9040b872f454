// Glob filtering of repo files (see file_filter.h).
#include "hub/file_filter.h"

#include <fnmatch.h>

namespace hearth::hub {

bool glob_match(std::string_view pattern, std::string_view path) {
  std::string p(pattern);
  if (!p.empty() && p.back() == '/') p += '*';
  return fnmatch(p.c_str(), std::string(path).c_str(), 0) == 0;
}

bool keep_file(std::string_view path, const std::vector<std::string>& include,
               const std::vector<std::string>& exclude) {
  bool included = include.empty();
  for (const auto& pattern : include) included = included || glob_match(pattern, path);
  if (!included) return false;
  for (const auto& pattern : exclude) {
    if (glob_match(pattern, path)) return false;
  }
  return true;
}

}  // namespace hearth::hub
