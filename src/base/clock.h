// Monotonic time for latencies and throughput (never the wall clock).
#pragma once

#include <chrono>
#include <cstdint>

namespace hearth {

using MonotonicClock = std::chrono::steady_clock;

inline std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             MonotonicClock::now().time_since_epoch())
      .count();
}

// Measures elapsed time from construction or the last reset().
class Stopwatch {
 public:
  Stopwatch() : start_(MonotonicClock::now()) {}
  void reset() { start_ = MonotonicClock::now(); }
  double elapsed_seconds() const {
    return std::chrono::duration<double>(MonotonicClock::now() - start_).count();
  }
  double elapsed_ms() const { return elapsed_seconds() * 1e3; }

 private:
  MonotonicClock::time_point start_;
};

}  // namespace hearth
