// --include / --exclude globs over repo file paths, with huggingface_hub's semantics:
// fnmatch-style ('*' also crosses '/'), a pattern ending in '/' means the whole folder,
// a file is kept when it matches some include (or there are none) and no exclude.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth::hub {

bool glob_match(std::string_view pattern, std::string_view path);

bool keep_file(std::string_view path, const std::vector<std::string>& include,
               const std::vector<std::string>& exclude);

}  // namespace hearth::hub
