// Python's two string formatting languages as templates use them: `"%s: %d" % (a, b)` (and the
// `format` filter) and `"{} {name:>8}".format(...)` (the sandbox's str.format).
#pragma once

#include <string>

#include "base/status.h"
#include "text/jinja/value.h"

namespace hearth::text::jinja {

// printf-style: `args` is a tuple of positionals, a dict for %(name)s, or one value.
Result<std::string> percent_format(const std::string& format, const Value& args);
// str.format with auto/explicit positional and keyword fields, !r/!s and format specs.
Result<std::string> brace_format(const std::string& format, const CallArgs& args);

}  // namespace hearth::text::jinja
