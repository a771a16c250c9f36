#include "runtime/core/stamp_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace rtd {
namespace {

std::int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A stamp reads back as the moment it was taken: within a few milliseconds
// of the system clock around it, and in the order stamps were taken.
TEST(StampClock, AStampReadsBackAsTheMomentItWasTaken) {
  const StampClock clock;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const std::int64_t before = system_ms();
  const std::uint64_t first = StampClock::stamp();
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const std::uint64_t second = StampClock::stamp();
  const std::int64_t after = system_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::int64_t first_ms = clock.unix_ms(first);
  const std::int64_t second_ms = clock.unix_ms(second);
  EXPECT_GE(first_ms, before - 5);
  EXPECT_LE(second_ms, after + 5);
  EXPECT_LE(first_ms, second_ms);
  // 40 ms apart, give or take the sleep's overshoot and the coarse fallback's tick.
  EXPECT_GE(second_ms - first_ms, 30);
  EXPECT_LE(second_ms - first_ms, after - before + 10);
}

// A stamp from before the clock was made (another clock's) is not placed
// before that: read back, it is no earlier than the clock's start.
TEST(StampClock, AStampFromBeforeTheClockIsClampedToItsStart) {
  const std::uint64_t early = StampClock::stamp();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::int64_t made = system_ms();
  const StampClock clock;
  const std::int64_t early_ms = clock.unix_ms(early);
  EXPECT_GE(early_ms, made - 5);
  EXPECT_LE(early_ms, system_ms());
}

}  // namespace
}  // namespace rtd
