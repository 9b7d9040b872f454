// Python's json.dumps over Jinja values: transformers replaces Jinja's tojson filter with
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False), and tool
// schemas reach the prompt through it, so every separator and escape must match.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
#include "text/jinja/value.h"

namespace hearth::text::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;          // null: one line; else newline + indent per level
  std::optional<std::string> item_separator;  // default ", " (or "," when indenting)
  std::string key_separator = ": ";
  bool sort_keys = false;
};

Result<std::string> json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace hearth::text::jinja
