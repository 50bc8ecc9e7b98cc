// Monotonic wall-clock time in seconds, for throughput figures and stats.
#pragma once

#include <chrono>

namespace sparrow {

inline double NowSeconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

}  // namespace sparrow
