// Logging goes through spdlog to stderr (stdout is reserved for command output).
// set_log_level() takes the names the --log-level flag accepts.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "base/status.h"

namespace hearth {

// Accepted: trace, debug, info, warn, error, critical, off.
Status set_log_level(std::string_view name);

// Installs the stderr logger with hearth's pattern; call once at process start.
void init_logging();

}  // namespace hearth
