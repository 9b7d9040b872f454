// Logger set-up.
#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace hearth {

Status set_log_level(std::string_view name) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
      {"off", spdlog::level::off},
  };
  for (const auto& [level_name, level] : kLevels) {
    if (level_name == name) {
      spdlog::set_level(level);
      return ok_status();
    }
  }
  return invalid_argument_error(
      "unknown log level '{}' (expected trace, debug, info, warn, error, critical or off)", name);
}

void init_logging() {
  auto logger = spdlog::stderr_color_mt("hearth");
  logger->set_pattern("%^[%H:%M:%S.%e %L]%$ %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::info);
}

}  // namespace hearth
