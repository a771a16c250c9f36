// The Gloo backend with its ranks as threads of one process over a MemoryStore:
// the mesh, a collective, and abort, without launching processes.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "collectives/factory.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"

namespace rtd {
namespace {

template <typename Fn>
void on_ranks(int n, Fn&& fn, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = make_communicator(CommunicatorOptions{
          .backend = "gloo", .store = store, .rank = r, .size = n, .timeout = timeout});
      fn(*comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooThreads, ThreeRanksSumAnAllReduce) {
  on_ranks(3, [](Communicator& comm) {
    std::vector<double> v(5, comm.rank() + 1.0);
    comm.all_reduce(view(v.data(), v.size()), ReduceOp::kSum)->wait();
    for (double x : v) EXPECT_EQ(x, 6.0);
  });
}

TEST(GlooThreads, WorldOfOneIsTheIdentity) {
  on_ranks(1, [](Communicator& comm) {
    std::vector<float> v{1, 2, 3}, out(3);
    comm.all_reduce(view(v.data(), 3), view(out.data(), 3), ReduceOp::kAvg)->wait();
    EXPECT_EQ(out, v);
    comm.all_gather(view(v.data(), 3), view(out.data(), 3))->wait();
    EXPECT_EQ(out, v);
    comm.barrier()->wait();
  });
}

TEST(GlooThreads, OperationsAfterAbortFailAtOnce) {
  on_ranks(2, [](Communicator& comm) {
    comm.barrier()->wait();
    comm.abort();
    std::vector<float> v(4);
    auto work = comm.all_reduce(view(v.data(), 4), ReduceOp::kSum);
    EXPECT_TRUE(work->done());
    ASSERT_TRUE(work->error().has_value());
    EXPECT_NE(std::string(work->error()->what()).find("aborted"), std::string::npos);
  });
}

// An operation in flight, its peer silent (a host cut off leaves the
// connection open), fails at once when another thread aborts the
// communicator, not at Gloo's timeout (20 s here).
TEST(GlooThreads, AbortFailsTheOperationInFlight) {
  std::atomic<bool> aborted{false};
  on_ranks(2, [&](Communicator& comm) {
    comm.barrier()->wait();
    if (comm.rank() == 1) {
      while (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;  // never joins the all-reduce
    }
    std::vector<float> v(4);
    auto work = comm.all_reduce(view(v.data(), 4), ReduceOp::kSum);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(work->done()) << "the peer never called";
    const auto t0 = std::chrono::steady_clock::now();
    std::thread aborter([&] { comm.abort(); });
    EXPECT_THROW(work->wait(), Error);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    aborter.join();
    aborted = true;
  });
}

// Both ranks abort while a large all-reduce moves its data: an operation
// whose bytes are being read or written on a connection when it closes
// must fail too, so that the communicator's destructor (which waits for its
// thread) returns long before Gloo's own timeout (60 s here). Seen as a
// worker that never exited after a job grew in place.
TEST(GlooThreads, AbortMidTransferLetsTheCommunicatorGo) {
  // Outlive the communicators: Gloo's thread may touch them until it ends.
  std::vector<std::vector<float>> data(2, std::vector<float>(std::size_t{16} << 20, 1.0f));
  for (int delay_ms : {0, 1, 2, 5, 10, 20, 40}) {
    const auto t0 = std::chrono::steady_clock::now();
    on_ranks(
        2,
        [&](Communicator& comm) {
          comm.barrier()->wait();
          std::vector<float>& v = data[comm.rank()];
          auto work = comm.all_reduce(view(v.data(), v.size()), ReduceOp::kSum);
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          comm.abort();
          try {
            work->wait();
          } catch (const Error&) {
          }
        },
        std::chrono::seconds(60));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30))
        << "aborted " << delay_ms << " ms into the all-reduce";
  }
}

// A receive from any rank waits on no one connection: the abort must end
// it too, or the communicator's destructor waits for Gloo's timeout.
TEST(GlooThreads, AbortEndsAReceiveFromAnyRank) {
  std::atomic<bool> done{false};
  float value = 0;
  const auto t0 = std::chrono::steady_clock::now();
  on_ranks(
      2,
      [&](Communicator& comm) {
        comm.barrier()->wait();
        if (comm.rank() == 1) {
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;  // never sends
        }
        auto work = comm.recv(view(&value, 1), Communicator::kAnySource, 7);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_FALSE(work->done()) << "nobody sent";
        comm.abort();
        EXPECT_THROW(work->wait(), Error);
        done = true;
      },
      std::chrono::seconds(60));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

TEST(Factory, UnknownBackendIsAConfigError) {
  try {
    make_communicator(
        CommunicatorOptions{.backend = "carrier-pigeon", .store = make_memory_store()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
  }
}

// A host name that does not resolve is a configuration error naming it, not a
// crash inside Gloo (which crashed on a second attempt).
TEST(Factory, GlooHostThatDoesNotResolveIsAConfigErrorNamingIt) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      make_communicator(CommunicatorOptions{.backend = "gloo",
                                            .store = make_memory_store(),
                                            .rank = 0,
                                            .size = 1,
                                            .host = "no-such-host.invalid"});
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kConfig);
      EXPECT_NE(std::string(e.what()).find("'no-such-host.invalid': the name does not resolve"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace rtd
