// StampClock's conversion of a stamp to Unix milliseconds.
#include "runtime/core/stamp_clock.h"

#include <algorithm>

#include "rt_dist/trace.h"

namespace rtd {

StampClock::StampClock() : base_stamp_(stamp()), base_us_(trace::now_us()) {}

std::int64_t StampClock::unix_ms(std::uint64_t at) const {
#if RTD_STAMP_COUNTER
  const std::uint64_t now_stamp = stamp();
  const std::int64_t now_us = trace::now_us();
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
