#include "collectives/cpu_work.h"

#include <gtest/gtest.h>

#include <thread>

namespace rtd {
namespace {

TEST(CpuWork, WaitReturnsOnceCompletedFromAnotherThread) {
  CpuWork work("op", std::chrono::seconds(5));
  EXPECT_FALSE(work.done());
  std::thread t([&] { work.complete(); });
  work.wait();
  t.join();
  EXPECT_TRUE(work.done());
  EXPECT_FALSE(work.error().has_value());
}

TEST(CpuWork, WaitRethrowsTheOperationsError) {
  CpuWork work("op", std::chrono::seconds(5));
  work.fail(Error(ErrorCategory::kBackend, "peer vanished"));
  EXPECT_TRUE(work.done());
  try {
    work.wait();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kBackend);
    EXPECT_STREQ(e.what(), "peer vanished");
  }
  ASSERT_TRUE(work.error().has_value());
}

TEST(CpuWork, WaitWithADeadlineThatPassesThrowsTimeoutNamingTheOperation) {
  CpuWork work("gloo all_reduce #7 on rank 1", std::chrono::seconds(5));
  try {
    work.wait(std::chrono::milliseconds(20));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("all_reduce #7"), std::string::npos);
  }
  EXPECT_FALSE(work.done());
}

TEST(CpuWork, WaitOnAStreamDoesNotBlock) {
  CpuWork work("op", std::chrono::seconds(5));
  work.wait(StreamRef{});
  EXPECT_FALSE(work.done());
}

}  // namespace
}  // namespace rtd
