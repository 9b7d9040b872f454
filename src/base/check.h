// HEARTH_CHECK: invariants that, when false, mean hearth itself is wrong. A failed check
// logs file, line, expression and message, then aborts (never exit()). Input errors
// are Status values, never checks.
#pragma once

#include <fmt/format.h>

#include <string>

namespace hearth {
[[noreturn]] void check_failed(const char* file, int line, const char* expr,
                               const std::string& message);
}  // namespace hearth

#define HEARTH_CHECK(cond, ...)                                                         \
  do {                                                                                  \
    if (__builtin_expect(!(cond), 0)) {                                                 \
      ::hearth::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                   \
  } while (0)

#ifdef NDEBUG
#define HEARTH_DCHECK(cond, ...) \
  do {                           \
  } while (0)
#else
#define HEARTH_DCHECK(cond, ...) HEARTH_CHECK(cond, __VA_ARGS__)
#endif
