// Human-readable sizes and counts for the hub verbs' tables and progress lines.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace hearth::hub {

// Decimal units, as disk and download sizes are usually quoted: "1.23 GB", "512 B".
inline std::string format_bytes(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1000 && unit < 4) {
    value /= 1000;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", value, value < 10 ? 2 : value < 100 ? 1 : 0, kUnits[unit]);
}

// Parameter counts: "135M", "8.03B".
inline std::string format_count(std::uint64_t count) {
  if (count >= 1'000'000'000) return fmt::format("{:.2f}B", count / 1e9);
  if (count >= 1'000'000) return fmt::format("{:.1f}M", count / 1e6);
  if (count >= 1'000) return fmt::format("{:.1f}K", count / 1e3);
  return fmt::format("{}", count);
}

}  // namespace hearth::hub
