// Clock reads cheap enough for every collective call: the kernel's time as of
// its last tick (at most a few milliseconds old), read without the hardware
// counter. For deadlines and ages measured in seconds, never for timing.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace rtd::coarse {

// steady_clock::now() (CLOCK_MONOTONIC) as of the last tick.
inline std::chrono::steady_clock::time_point steady_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) +
                                               std::chrono::nanoseconds(ts.tv_nsec));
}

// Milliseconds since the Unix epoch as of the last tick.
inline std::int64_t unix_ms() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace rtd::coarse
