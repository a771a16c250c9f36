// The store service over gRPC on loopback, called from many threads at once:
// writers, counters, compare-and-set, waiting Gets woken by writes or by
// their deadline, and a server that goes away under waiting Gets. Its tests
// run in unit_tests, and under ThreadSanitizer in concurrency_tests
// (tests/sanitize/sanitize.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "rt_dist/error.h"
#include "rt_dist/store.h"
#include "runtime/core/store/store_server.h"

namespace rtd {
namespace {

using std::chrono::milliseconds;

std::string address(const StoreServer& server) {
  return "127.0.0.1:" + std::to_string(server.port());
}

TEST(StoreServiceThreads, ManyClientsAtOnceKeepEveryCountAndWakeEveryWaiter) {
  StoreServer server("127.0.0.1", 0, "secret");
  constexpr int kThreads = 8, kRounds = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto store = make_grpc_store(address(server), "secret");
      const int next = (t + 1) % kThreads;
      try {
        for (int i = 0; i < kRounds; ++i) {
          store->set("key/" + std::to_string(t) + "/" + std::to_string(i), std::to_string(i));
          store->add("counter", 1);
          // The next thread's key of this round: written already, or soon.
          const auto got = store->get("key/" + std::to_string(next) + "/" + std::to_string(i),
                                      milliseconds(20000));
          if (got != std::to_string(i)) ++failures;
          // One thread of all wins each round's claim; the others see its value.
          const auto held = store->compare_set("claim/" + std::to_string(i), "", std::to_string(t));
          if (held.empty()) ++failures;
          if (!store->check({"claim/" + std::to_string(i)})) ++failures;
          if (i % 8 == 0) {  // a Get that nothing answers ends at its deadline
            try {
              store->get("never/" + std::to_string(t), milliseconds(50));
              ++failures;
            } catch (const Error& e) {
              if (e.category() != ErrorCategory::kTimeout) ++failures;
            }
          }
          // Its reader (the thread before it in the ring) lags it by fewer rounds than threads.
          if (i >= 2 * kThreads)
            store->remove("key/" + std::to_string(t) + "/" + std::to_string(i - 2 * kThreads));
        }
      } catch (const Error& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto store = make_grpc_store(address(server), "secret");
  EXPECT_EQ(store->add("counter", 0), kThreads * kRounds);
  std::vector<std::string> claims;
  for (int i = 0; i < kRounds; ++i) claims.push_back("claim/" + std::to_string(i));
  EXPECT_TRUE(store->check(claims));
}

// Gets waiting on keys nobody writes, while the server is destroyed: each
// ends with an error, none hangs, and the server's destructor returns.
TEST(StoreServiceThreads, AServerDestroyedUnderWaitingGetsAnswersThem) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, "secret");
  const auto where = address(*server);
  constexpr int kWaiters = 6;
  std::atomic<int> started{0}, ended{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < kWaiters; ++t) {
    waiters.emplace_back([&, t] {
      auto store = make_grpc_store(where, "secret");
      store->set("ready/" + std::to_string(t), "1");
      ++started;
      try {
        store->get("never/" + std::to_string(t), milliseconds(60000));
        ADD_FAILURE() << "a Get of a key nobody wrote returned";
      } catch (const Error&) {
      }
      ++ended;
    });
  }
  while (started < kWaiters) std::this_thread::sleep_for(milliseconds(5));
  std::this_thread::sleep_for(milliseconds(100));  // the Gets reach the server
  const auto t0 = std::chrono::steady_clock::now();
  server.reset();
  for (auto& th : waiters) th.join();
  EXPECT_EQ(ended.load(), kWaiters);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

}  // namespace
}  // namespace rtd
