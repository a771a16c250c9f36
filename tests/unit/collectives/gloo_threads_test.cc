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
void on_ranks(int n, Fn&& fn) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = make_communicator(CommunicatorOptions{.backend = "gloo",
                                                        .store = store,
                                                        .rank = r,
                                                        .size = n,
                                                        .timeout = std::chrono::seconds(20)});
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
