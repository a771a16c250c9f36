#include "runtime/core/slurm.h"

#include <gtest/gtest.h>

#include "rt_dist/error.h"

namespace rtd::slurm {
namespace {

TEST(Slurm, FirstHostOfAHostlist) {
  EXPECT_EQ(first_host("node7"), "node7");
  EXPECT_EQ(first_host("a,b"), "a");
  EXPECT_EQ(first_host("gpu[003-010,015],login1"), "gpu003");
  EXPECT_EQ(first_host("gpu[12,3]"), "gpu12");
  EXPECT_EQ(first_host("rack[2-3]-n[07-09]"), "rack2-n07");
  EXPECT_EQ(first_host("n[1-2]-ib,x"), "n1-ib");
  for (const char* bad : {"", "gpu[", "gpu[a-b]", "gpu[]", "[1-2"}) {
    EXPECT_THROW(first_host(bad), Error) << bad;
  }
}

TEST(Slurm, TasksOnEachNode) {
  EXPECT_EQ(tasks_on_node("4", 0), 4);
  EXPECT_EQ(tasks_on_node("4(x2),3", 0), 4);
  EXPECT_EQ(tasks_on_node("4(x2),3", 1), 4);
  EXPECT_EQ(tasks_on_node("4(x2),3", 2), 3);
  EXPECT_THROW(tasks_on_node("4(x2),3", 3), Error);
  EXPECT_THROW(tasks_on_node("4(x2", 0), Error);
  EXPECT_THROW(tasks_on_node("x", 0), Error);
}

}  // namespace
}  // namespace rtd::slurm
