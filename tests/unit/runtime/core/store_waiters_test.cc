// The store service's waiting Gets (StoreWaiters) driven from threads, with
// no gRPC: entries admitted, woken by writes, expired by a ticker and
// cancelled all at once, each answered exactly once, and the bounds. Run in
// unit_tests and under ThreadSanitizer in concurrency_tests.
#include "runtime/core/store/store_waiters.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace rtd {
namespace {

using Clock = StoreWaiters::Clock;
using std::chrono::milliseconds;

// What one entry was answered: how often, and with what.
struct Answers {
  explicit Answers(int n) : times(n), ok(n), value(n) {}
  std::vector<std::atomic<int>> times;
  std::vector<std::atomic<bool>> ok;
  std::vector<std::string> value;  // written by the one answer
};

StoreWaiters::Entry entry(Answers& a, int i, const std::string& key, milliseconds wait,
                          const std::string& peer = "ipv4:10.0.0.1") {
  const auto now = Clock::now();
  return StoreWaiters::Entry{
      .key = key,
      .peer = peer,
      .since = now,
      .until = now + wait,
      .cancelled = {},
      .answer = [&a, i](const grpc::Status& status, const std::string* value) {
        if (value) a.value[i] = *value;
        a.ok[i] = status.ok();
        ++a.times[i];
      }};
}

TEST(StoreWaiters, WakesExpiresAndAdmitsFromManyThreadsEachAnsweredOnce) {
  StoreWaiters waiters(StoreServiceLimits{});
  constexpr int kThreads = 6, kEach = 300, kKeys = 50;
  Answers answers(kThreads * kEach);
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop) {
      waiters.expire();
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
  std::thread writer([&] {
    while (!stop) {
      for (int k = 0; k < kKeys; ++k)
        waiters.wake("k" + std::to_string(k), [k] { return "v" + std::to_string(k); });
    }
  });
  std::vector<std::thread> admitters;
  for (int t = 0; t < kThreads; ++t) {
    admitters.emplace_back([&, t] {
      for (int j = 0; j < kEach; ++j) {
        const int i = t * kEach + j;
        // Every tenth waits for a key nobody writes: its deadline answers it.
        const std::string key = j % 10 == 0 ? "never" : "k" + std::to_string(i % kKeys);
        const auto wait = milliseconds(j % 10 == 0 ? 5 : 60000);
        ASSERT_TRUE(waiters.admit(entry(answers, i, key, wait)).ok());
      }
    });
  }
  for (auto& a : admitters) a.join();
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (waiters.size() > 0 && Clock::now() < until) std::this_thread::sleep_for(milliseconds(5));
  stop = true;
  ticker.join();
  writer.join();
  EXPECT_EQ(waiters.size(), 0u);
  EXPECT_EQ(waiters.bytes(), 0u) << "every entry's weight given back";
  for (int i = 0; i < kThreads * kEach; ++i) {
    ASSERT_EQ(answers.times[i].load(), 1) << "entry " << i;
    const int j = i % kEach;
    if (j % 10 == 0) {
      EXPECT_FALSE(answers.ok[i]) << "entry " << i << " waited for a key nobody wrote";
    } else {
      EXPECT_TRUE(answers.ok[i]) << "entry " << i;
      EXPECT_EQ(answers.value[i], "v" + std::to_string(i % kKeys));
    }
  }
}

TEST(StoreWaiters, CancelAnswersEveryEntryOnceAndRefusesLaterOnes) {
  StoreWaiters waiters(StoreServiceLimits{});
  constexpr int kThreads = 4, kEach = 200;
  Answers answers(kThreads * kEach);
  std::vector<std::atomic<bool>> admitted(kThreads * kEach);
  std::vector<std::thread> admitters;
  for (int t = 0; t < kThreads; ++t) {
    admitters.emplace_back([&, t] {
      for (int j = 0; j < kEach; ++j) {
        const int i = t * kEach + j;
        const auto status =
            waiters.admit(entry(answers, i, "k" + std::to_string(j), milliseconds(60000)));
        admitted[i] = status.ok();
        if (!status.ok()) EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(2));
  waiters.cancel();
  for (auto& a : admitters) a.join();
  for (int i = 0; i < kThreads * kEach; ++i) {
    EXPECT_EQ(answers.times[i].load(), admitted[i] ? 1 : 0) << "entry " << i;
    if (admitted[i]) EXPECT_FALSE(answers.ok[i]);
  }
  EXPECT_EQ(waiters.size(), 0u);
  EXPECT_FALSE(waiters.admit(entry(answers, 0, "k", milliseconds(1000))).ok());
}

TEST(StoreWaiters, BoundsRefuseWithoutAnswering) {
  StoreServiceLimits limits;
  limits.max_waiters = 3;
  limits.max_waiters_per_peer = 2;
  limits.max_waiter_bytes = 10 * StoreServiceLimits::kWaiterCost;
  StoreWaiters waiters(limits);
  Answers answers(8);
  EXPECT_TRUE(waiters.admit(entry(answers, 0, "a", milliseconds(60000), "h1")).ok());
  EXPECT_TRUE(waiters.admit(entry(answers, 1, "b", milliseconds(60000), "h1")).ok());
  auto refused = waiters.admit(entry(answers, 2, "c", milliseconds(60000), "h1"));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("from h1"), std::string::npos) << refused.error_message();
  EXPECT_TRUE(waiters.admit(entry(answers, 3, "d", milliseconds(60000), "h2")).ok());
  refused = waiters.admit(entry(answers, 4, "e", milliseconds(60000), "h3"));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(answers.times[2].load() + answers.times[4].load(), 0) << "a refusal answers nothing";
  StoreServiceLimits small;
  small.max_waiter_bytes = StoreServiceLimits::kWaiterCost + 4;
  StoreWaiters light(small);
  EXPECT_TRUE(light.admit(entry(answers, 5, "abcd", milliseconds(60000))).ok());
  EXPECT_EQ(light.admit(entry(answers, 6, "x", milliseconds(60000))).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  light.cancel();
  waiters.cancel();
}

}  // namespace
}  // namespace rtd
