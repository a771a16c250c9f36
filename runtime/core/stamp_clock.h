// StampClock: a time stamp cheap enough for every collective call, for ages
// in seconds (never for timing). stamp() reads the processor's counter
// (x86-64: the time-stamp counter; aarch64: the virtual counter): one
// instruction, no memory and no call, where even the coarse clock goes through
// libc and the vDSO and costs a small call several cache misses. A stamp
// becomes Unix milliseconds only when read back (unix_ms), by the counter's
// rate between two moments compared with the system clock: when the
// StampClock was made and when it is asked. Elsewhere a stamp is the coarse
// clock's milliseconds.
#pragma once

#include <cstdint>

#include "runtime/core/coarse_clock.h"

#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(RTD_AB_WITHOUT_TSC)
#define RTD_STAMP_COUNTER 1
#else
#define RTD_STAMP_COUNTER 0
#endif

namespace rtd {

class StampClock {
 public:
  StampClock();

  static std::uint64_t stamp() {
#if RTD_STAMP_COUNTER && defined(__x86_64__)
    return __builtin_ia32_rdtsc();  // the intrinsic's own builtin, without its header
#elif RTD_STAMP_COUNTER && defined(__aarch64__)
    std::uint64_t ticks;
    asm volatile("mrs %0, cntvct_el0" : "=r"(ticks));
    return ticks;
#else
    return static_cast<std::uint64_t>(coarse::unix_ms());
#endif
  }

  // A stamp taken since this clock was made, in milliseconds since the Unix
  // epoch (within a millisecond or so; clamped between then and now).
  std::int64_t unix_ms(std::uint64_t stamp) const;

 private:
  std::uint64_t base_stamp_ = 0;
  std::int64_t base_us_ = 0;  // the system clock at base_stamp_
};

}  // namespace rtd
