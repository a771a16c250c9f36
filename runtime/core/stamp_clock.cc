// StampClock's conversion of a stamp to Unix milliseconds.
#include "runtime/core/stamp_clock.h"

#include <algorithm>
#include <chrono>

namespace rtd {
namespace {

std::int64_t system_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StampClock::StampClock() : base_stamp_(stamp()), base_us_(system_us()) {}

std::int64_t StampClock::unix_ms(std::uint64_t at) const {
#if RTD_STAMP_COUNTER
  const std::uint64_t now_stamp = stamp();
  const std::int64_t now_us = system_us();
  if (now_stamp <= base_stamp_ || now_us <= base_us_ || at <= base_stamp_)
    return (at <= base_stamp_ ? std::min(base_us_, now_us) : now_us) / 1000;
  // The counter's rate over the whole time since the clock was made.
  const double us_per_tick =
      static_cast<double>(now_us - base_us_) / static_cast<double>(now_stamp - base_stamp_);
  const double us =
      static_cast<double>(base_us_) + static_cast<double>(at - base_stamp_) * us_per_tick;
  return static_cast<std::int64_t>(
             std::clamp(us, static_cast<double>(base_us_), static_cast<double>(now_us))) /
         1000;
#else
  return std::max(static_cast<std::int64_t>(at), base_us_ / 1000);
#endif
}

}  // namespace rtd
