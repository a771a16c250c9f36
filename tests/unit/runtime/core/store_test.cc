#include "rt_dist/store.h"

#include <gtest/gtest.h>

#include <thread>

#include "rt_dist/error.h"
#include "tests/testing/store_contract.h"

namespace rtd {
namespace {

TEST(MemoryStore, FollowsTheStoreContract) {
  testing_util::check_store_contract(*make_memory_store());
}

TEST(PrefixStore, FollowsTheStoreContract) {
  auto inner = make_memory_store();
  auto prefixed = make_prefix_store("round1", inner);
  testing_util::check_store_contract(*prefixed);
}

TEST(PrefixStore, KeepsRoundsApart) {
  auto inner = make_memory_store();
  auto a = make_prefix_store("round0", inner);
  auto b = make_prefix_store("round1", inner);
  a->set("k", "from0");
  EXPECT_FALSE(b->try_get("k").has_value());
  b->set("k", "from1");
  EXPECT_EQ(a->get("k", std::chrono::milliseconds(10)), "from0");
  EXPECT_EQ(*inner->try_get("round1/k"), "from1");
  EXPECT_TRUE(inner->check({"round0/k", "round1/k"}));
}

TEST(MemoryStore, GetWaitsForALaterSet) {
  auto store = make_memory_store();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store->set("late", "value");
  });
  EXPECT_EQ(store->get("late", std::chrono::seconds(5)), "value");
  writer.join();
}

TEST(MemoryStore, AddOnANonIntegerIsRejected) {
  auto store = make_memory_store();
  store->set("text", "hello");
  EXPECT_THROW(store->add("text", 1), Error);
}

}  // namespace
}  // namespace rtd
