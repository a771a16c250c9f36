// HandoffRing: items reach consumers once, in order, across threads; a full
// ring refuses without writing.
#include "collectives/nccl/handoff_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace rtd::nccl {
namespace {

TEST(HandoffRing, DrainsWhatWasPushedOldestFirst) {
  HandoffRing<int, 4> ring;
  EXPECT_TRUE(ring.push(1));
  EXPECT_TRUE(ring.push(2));
  std::vector<int> seen;
  ring.drain([&](int&& v) { seen.push_back(v); });
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  ring.drain([&](int&& v) { seen.push_back(v); });  // nothing new
  EXPECT_EQ(seen.size(), 2u);
}

TEST(HandoffRing, AFullRingRefusesAndKeepsTheItem) {
  HandoffRing<std::unique_ptr<int>, 2> ring;
  EXPECT_TRUE(ring.push(std::make_unique<int>(1)));
  EXPECT_TRUE(ring.push(std::make_unique<int>(2)));
  auto third = std::make_unique<int>(3);
  EXPECT_FALSE(ring.push(std::move(third)));
  ASSERT_NE(third, nullptr) << "a refused push must not take the item";
  std::vector<int> seen;
  ring.drain([&](std::unique_ptr<int>&& v) { seen.push_back(*v); });
  EXPECT_TRUE(ring.push(std::move(third))) << "draining frees the slots";
  ring.drain([&](std::unique_ptr<int>&& v) { seen.push_back(*v); });
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
}

// One producer, two consumers taking turns under a lock (the communicator's
// caller and its watchdog thread): every item arrives exactly once, in order.
TEST(HandoffRing, EveryItemArrivesOnceInOrderAcrossThreads) {
  constexpr int kItems = 200'000;
  HandoffRing<std::vector<int>, 64> ring;  // a type that owns memory: a torn move shows
  std::mutex consumers;
  std::vector<int> seen;
  seen.reserve(kItems);
  auto take = [&](std::vector<int>&& v) {
    ASSERT_EQ(v.size(), 1u);
    seen.push_back(v[0]);
  };
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      std::lock_guard<std::mutex> lock(consumers);
      ring.drain(take);
    }
  });
  for (int i = 0; i < kItems; ++i) {
    std::vector<int> item{i};
    while (!ring.push(std::move(item))) {  // full: the producer drains, as the caller does
      std::lock_guard<std::mutex> lock(consumers);
      ring.drain(take);
    }
  }
  done = true;
  watcher.join();
  ring.drain(take);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kItems));
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(seen[i], i);
}

}  // namespace
}  // namespace rtd::nccl
