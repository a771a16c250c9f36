#include "launcher/restart_policy.h"

#include <gtest/gtest.h>

namespace rtd::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RestartBackoff, DoublesFromTheFirstUpToTheMost) {
  EXPECT_EQ(restart_backoff(1, seconds(1), seconds(30), 1.0), milliseconds(1000));
  EXPECT_EQ(restart_backoff(2, seconds(1), seconds(30), 1.0), milliseconds(2000));
  EXPECT_EQ(restart_backoff(5, seconds(1), seconds(30), 1.0), milliseconds(16000));
  EXPECT_EQ(restart_backoff(6, seconds(1), seconds(30), 1.0), milliseconds(30000));
  EXPECT_EQ(restart_backoff(1000, seconds(1), seconds(30), 1.0), milliseconds(30000));
  EXPECT_EQ(restart_backoff(3, seconds(0), seconds(30), 1.0), milliseconds(0)) << "0 is off";
}

TEST(RestartBackoff, JitterStaysWithinAQuarter) {
  EXPECT_EQ(restart_backoff(1, seconds(4), seconds(30), 0.75), milliseconds(3000));
  EXPECT_EQ(restart_backoff(1, seconds(4), seconds(30), 1.25), milliseconds(5000));
  EXPECT_EQ(restart_backoff(1, seconds(4), seconds(30), 9.0), milliseconds(5000));
  for (int i = 0; i < 100; ++i) {
    const double j = draw_jitter();
    EXPECT_GE(j, 0.75);
    EXPECT_LE(j, 1.25);
  }
}

TEST(RestartBackoff, ASpentBudgetListsEveryFailureInOrder) {
  EXPECT_EQ(budget_spent({"a failed", "b failed"}, 1),
            "the restart budget is spent (1 of 1 restarts); the failures, first to last: 1) a "
            "failed; 2) b failed");
}

}  // namespace
}  // namespace rtd::launcher
