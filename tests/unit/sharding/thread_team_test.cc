// ThreadTeam: every element of every run is visited exactly once, whatever
// the chunk and the team's size, run after run on the same team.
#include "sharding/thread_team.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace rtd::shard::cpu {
namespace {

TEST(ThreadTeam, EveryElementOnceRunAfterRun) {
  for (int helpers : {0, 1, 5}) {
    ThreadTeam team(helpers);
    EXPECT_EQ(team.size(), helpers + 1);
    for (std::size_t n : {0, 1, 7, 1000, 100003}) {
      for (std::size_t chunk : {1, 16, 4096, 1000000}) {
        std::vector<std::atomic<int>> seen(n);
        team.run(n, chunk, [&](std::size_t begin, std::size_t end) {
          ASSERT_LT(begin, end);
          ASSERT_LE(end - begin, chunk);
          for (std::size_t i = begin; i < end; ++i) seen[i]++;
        });
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(seen[i].load(), 1) << "element " << i << " of " << n << ", chunk " << chunk;
      }
    }
  }
}

}  // namespace
}  // namespace rtd::shard::cpu
