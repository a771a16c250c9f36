// RecycledBlocks: a thread's freed blocks come back to it; blocks freed on
// another thread, beyond a full shelf, or as a thread ends are returned to the
// general allocator (ASan and the leak check see any that are not).
#include "collectives/nccl/recycled_blocks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace rtd::nccl {
namespace {

struct Payload {
  explicit Payload(int v) : value(v) {}
  int value;
  char filler[120] = {};
};

std::shared_ptr<Payload> make(int v) {
  return std::allocate_shared<Payload>(RecycledBlocks<Payload>(), v);
}

TEST(RecycledBlocks, AFreedBlockIsHandedOutAgainOnItsThread) {
  const Payload* first = nullptr;
  {
    auto p = make(1);
    first = p.get();
    EXPECT_EQ(p->value, 1);
  }
  auto again = make(2);
  EXPECT_EQ(again.get(), first);  // the same block, a new object in it
  EXPECT_EQ(again->value, 2);
}

TEST(RecycledBlocks, BlocksStartOnACacheLine) {
  // The block holds the shared_ptr's counts and then the object: the block's
  // start (not the object's) is on a 64-byte boundary, fresh or recycled.
  std::vector<std::shared_ptr<Payload>> live;
  for (int i = 0; i < 20; ++i) live.push_back(make(i));
  live.erase(live.begin(), live.begin() + 10);
  for (int i = 0; i < 10; ++i) live.push_back(make(i));
  for (const auto& p : live) {
    const auto offset = reinterpret_cast<std::uintptr_t>(p.get()) % 64;
    EXPECT_EQ(offset, reinterpret_cast<std::uintptr_t>(live.front().get()) % 64);
    EXPECT_LE(offset, 32u);  // just after the counts
  }
}

TEST(RecycledBlocks, LiveObjectsNeverShareABlock) {
  std::vector<std::shared_ptr<Payload>> live;
  std::set<const Payload*> seen;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i) live.push_back(make(i));  // more than a shelf keeps
    for (const auto& p : live) seen.insert(p.get());
    EXPECT_EQ(seen.size(), live.size());
    for (int i = 0; i < 100; ++i) EXPECT_EQ(live[static_cast<std::size_t>(i)]->value, i);
    live.clear();
    seen.clear();
  }
}

TEST(RecycledBlocks, ObjectsFreedOnOtherThreadsAndThreadsThatEnd) {
  std::vector<std::shared_ptr<Payload>> made;
  for (int i = 0; i < 50; ++i) made.push_back(make(i));
  std::thread other([&] {
    made.clear();         // freed here: kept by this thread's shelf, beyond it deleted
    auto mine = make(7);  // taken from this thread's shelf
    EXPECT_EQ(mine->value, 7);
    // The thread ends: its shelf's blocks go back to the general allocator.
  });
  other.join();
  auto after = make(8);
  EXPECT_EQ(after->value, 8);
}

// Threads make objects, drop some and hand the rest to the others, which
// drop them: each thread's list stays its own (run under ThreadSanitizer, a
// race shows; under AddressSanitizer, a block handed out twice or lost).
TEST(RecycledBlocks, ThreadsThatHandObjectsToEachOtherKeepTheirListsApart) {
  constexpr int kThreads = 8;
  std::mutex mu;
  std::vector<std::shared_ptr<Payload>> handed;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto mine = make(t * 10000 + i);
        auto kept = make(i);
        EXPECT_NE(mine.get(), kept.get());
        EXPECT_EQ(mine->value, t * 10000 + i);
        std::shared_ptr<Payload> other;
        {
          std::lock_guard<std::mutex> lock(mu);
          handed.push_back(std::move(mine));
          if (handed.size() > 4) {
            other = std::move(handed.front());
            handed.erase(handed.begin());
          }
        }
        EXPECT_EQ(kept->value, i);
        other.reset();  // made on some thread, freed on this one
      }
    });
  }
  for (auto& t : threads) t.join();
  handed.clear();
}

// Blocks of an alignment nothing else in the tests uses, counted by the
// general allocator's aligned calls (replaced below): what went back.
constexpr std::size_t kCountedAlign = 512;
std::atomic<long> g_counted_blocks{0};

struct alignas(kCountedAlign) Counted {
  static inline std::atomic<int> live{0};
  Counted() { ++live; }
  ~Counted() { --live; }
  char filler[64] = {};
};

struct Holder {
  ~Holder() { held.reset(); }  // runs as the thread ends, perhaps after the shelf's end
  std::shared_ptr<Counted> held;
};

// Dropped by a thread-local's destructor, before or after the thread's list
// goes back: either way the object is destroyed and its block returned to
// the general allocator, not left on a list nobody owns.
TEST(RecycledBlocks, AnObjectDroppedAsItsThreadEndsIsFreed) {
  const long blocks_before = g_counted_blocks.load();
  std::thread t([] {
    thread_local Holder holder;
    holder.held = std::allocate_shared<Counted>(RecycledBlocks<Counted>());
    // One more, dropped now: kept on this thread's list until the thread ends.
    std::allocate_shared<Counted>(RecycledBlocks<Counted>()).reset();
    EXPECT_EQ(Counted::live.load(), 1);
  });
  t.join();
  EXPECT_EQ(Counted::live.load(), 0) << "the object was not destroyed";
  EXPECT_EQ(g_counted_blocks.load(), blocks_before)
      << "blocks of the ended thread were not returned to the general allocator";
}

}  // namespace
}  // namespace rtd::nccl

// The aligned calls of the general allocator, counting blocks of kCountedAlign.
void* operator new(std::size_t bytes, std::align_val_t align) {
  if (static_cast<std::size_t>(align) == rtd::nccl::kCountedAlign) ++rtd::nccl::g_counted_blocks;
  const std::size_t a = static_cast<std::size_t>(align);
  void* p = std::aligned_alloc(a, (bytes + a - 1) / a * a);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p, std::align_val_t align) noexcept {
  if (p != nullptr && static_cast<std::size_t>(align) == rtd::nccl::kCountedAlign)
    --rtd::nccl::g_counted_blocks;
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t align) noexcept {
  operator delete(p, align);
}
