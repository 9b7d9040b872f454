// Check failure reporting.
#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace hearth {

void check_failed(const char* file, int line, const char* expr, const std::string& message) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s %s\n", file, line, expr, message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace hearth
