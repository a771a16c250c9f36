// The Gloo backend's threads at work together: operations queued back to
// back without waiting and waited for from another thread, communicators of
// one rank used at once from threads of their own (split, send/receive in a
// group), and an abort from another thread while operations are queued. Its
// ranks are threads of one process over a MemoryStore; the tests run in
// unit_tests and under ThreadSanitizer in concurrency_tests
// (tests/sanitize/sanitize.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/factory.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"

namespace rtd {
namespace {

template <typename Fn>
void on_ranks(int n, Fn&& fn) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = make_communicator(CommunicatorOptions{.backend = "gloo",
                                                        .store = store,
                                                        .rank = r,
                                                        .size = n,
                                                        .timeout = std::chrono::seconds(30)});
      fn(*comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooConcurrency, OperationsQueuedBackToBackAreWaitedForFromAnotherThread) {
  constexpr int kRanks = 3, kOps = 24, kCount = 257;
  on_ranks(kRanks, [](Communicator& comm) {
    const int r = comm.rank();
    std::vector<std::vector<float>> in(kOps), out(kOps);
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < kOps; ++i) {
      in[i].assign(kCount * kRanks, static_cast<float>(r + i));
      switch (i % 4) {
        case 0:
          works.push_back(comm.all_reduce(view(in[i].data(), in[i].size()), ReduceOp::kSum));
          break;
        case 1:
          out[i].resize(kCount * kRanks);
          works.push_back(
              comm.all_gather(view(in[i].data(), kCount), view(out[i].data(), out[i].size())));
          break;
        case 2:
          out[i].resize(kCount);
          works.push_back(comm.reduce_scatter(view(in[i].data(), in[i].size()),
                                              view(out[i].data(), kCount), ReduceOp::kMax));
          break;
        default:
          works.push_back(comm.broadcast(view(in[i].data(), in[i].size()), i % kRanks));
      }
    }
    std::thread waiter([&] {
      for (auto& w : works) w->wait();
    });
    waiter.join();
    for (int i = 0; i < kOps; ++i) {
      const float sum = kRanks * i + kRanks * (kRanks - 1) / 2.0f;
      switch (i % 4) {
        case 0:
          for (float x : in[i]) ASSERT_EQ(x, sum) << "op " << i;
          break;
        case 1:
          for (int j = 0; j < kRanks * kCount; ++j) ASSERT_EQ(out[i][j], j / kCount + i);
          break;
        case 2:
          for (float x : out[i]) ASSERT_EQ(x, kRanks - 1 + i);
          break;
        default:
          for (float x : in[i]) ASSERT_EQ(x, i % kRanks + i);
      }
    }
  });
}

// Each rank drives its communicator and a split of it from two threads at
// once (one caller per communicator, as the library asks).
TEST(GlooConcurrency, ACommunicatorAndItsSplitRunAtOnceOnThreadsOfTheirOwn) {
  constexpr int kRanks = 4, kRounds = 30;
  on_ranks(kRanks, [](Communicator& comm) {
    auto half = comm.split(comm.rank() % 2, comm.rank());
    ASSERT_NE(half, nullptr);
    std::thread side([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::vector<double> v(64, half->rank() + 1.0);
        half->all_reduce(view(v.data(), v.size()), ReduceOp::kSum)->wait();
        for (double x : v) ASSERT_EQ(x, 3.0);
      }
    });
    for (int i = 0; i < kRounds; ++i) {
      std::vector<int> ring_out(16, comm.rank() * 100 + i), ring_in(16, -1);
      const int next = (comm.rank() + 1) % kRanks, prev = (comm.rank() + kRanks - 1) % kRanks;
      comm.group([&] {
            comm.send(view(ring_out.data(), ring_out.size()), next, i);
            comm.recv(view(ring_in.data(), ring_in.size()), prev, i);
          })
          ->wait();
      for (int x : ring_in) ASSERT_EQ(x, prev * 100 + i);
    }
    side.join();
  });
}

// Operations queued behind one that cannot finish (a rank never calls) all
// fail when another thread aborts, and the communicator is destroyed after.
TEST(GlooConcurrency, AnAbortFromAnotherThreadFailsEveryQueuedOperation) {
  std::atomic<bool> failed{false};
  on_ranks(2, [&](Communicator& comm) {
    comm.barrier()->wait();
    if (comm.rank() == 1) {  // never calls the collectives below, and stays
      while (!failed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    std::vector<std::vector<float>> bufs(8, std::vector<float>(1024, 1.0f));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& b : bufs) works.push_back(comm.all_reduce(view(b.data(), b.size()), ReduceOp::kSum));
    std::thread aborter([&] { comm.abort(); });
    for (auto& w : works) EXPECT_THROW(w->wait(), Error);
    failed = true;
    aborter.join();
  });
}

}  // namespace
}  // namespace rtd
