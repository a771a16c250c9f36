// Every collective x dtype x size x in-place on the ranks dtrun started,
// checked against a serial reference that each rank computes for all ranks.
// Built twice: over Gloo with host buffers (collectives_mp_test) and over NCCL
// with GPU buffers (gpu_collectives_test, RTD_TEST_CUDA). Every rank runs the
// same tests in the same order.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/factory.h"
#include "runtime/core/config.h"
#include "runtime/env.h"
#include "tests/multiproc/world.h"

namespace rtd::testing_util {
namespace {

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64,  DType::kInt32,
                         DType::kInt64,   DType::kBFloat16, DType::kFloat16};
const std::size_t kCounts[] = {0, 1, 7, 1000, 65537};

using ReduceParam = std::tuple<DType, ReduceOp, std::size_t, bool>;

std::string reduce_name(const ::testing::TestParamInfo<ReduceParam>& info) {
  auto [dtype, op, count, in_place] = info.param;
  return std::string(to_string(dtype)) + "_" + std::string(to_string(op)) + "_" +
         std::to_string(count) + (in_place ? "_inplace" : "_outofplace");
}

// Every dtype x op x count x in-place, less avg on integers (rejected; see BadArguments).
std::vector<ReduceParam> reduce_params() {
  std::vector<ReduceParam> params;
  for (DType dtype : kDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax}) {
      bool integer = dtype == DType::kInt32 || dtype == DType::kInt64;
      if (integer && op == ReduceOp::kAvg) continue;
      for (std::size_t count : kCounts) {
        for (bool in_place : {false, true}) params.emplace_back(dtype, op, count, in_place);
      }
    }
  }
  return params;
}

// Sizes that RTD_CE_STAGED stages by copy engines (from 1 MiB moved), one of
// them leaving the blocks unaligned: float32 and bfloat16, sum and average.
const std::size_t kLargeCounts[] = {std::size_t(1) << 18, (std::size_t(1) << 18) + 3};

std::vector<ReduceParam> large_reduce_params() {
  std::vector<ReduceParam> params;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (std::size_t count : kLargeCounts) {
        for (bool in_place : {false, true}) params.emplace_back(dtype, op, count, in_place);
      }
    }
  }
  return params;
}

void expect_reduced(const Buffer& result, std::size_t first_index, ReduceOp op, int n) {
  for (std::size_t i = 0; i < result.count; ++i) {
    double expected = reduce_reference(op, n, first_index + i, 0);
    ASSERT_NEAR(result.get(i), round_to(result.dtype, expected), tolerance(result.dtype, expected))
        << "element " << i;
  }
}

class AllReduceTest : public WorldTestP<ReduceParam> {};

TEST_P(AllReduceTest, MatchesSerialReference) {
  auto [dtype, op, count, in_place] = GetParam();
  const int n = comm().size(), r = comm().rank();
  Placed in(dtype, count), out(dtype, count);
  in.host.fill_rank(r, 0);
  in.push();
  if (in_place) {
    comm().all_reduce(in.view(), op)->wait();
    in.pull();
    expect_reduced(in.host, 0, op, n);
  } else {
    comm().all_reduce(in.view(), out.view(), op)->wait();
    out.pull();
    expect_reduced(out.host, 0, op, n);
    Buffer original(dtype, count);
    original.fill_rank(r, 0);
    in.pull();
    EXPECT_EQ(in.host.bytes, original.bytes) << "out-of-place all_reduce changed its input";
  }
}

INSTANTIATE_TEST_SUITE_P(All, AllReduceTest, ::testing::ValuesIn(reduce_params()), reduce_name);
INSTANTIATE_TEST_SUITE_P(Large, AllReduceTest, ::testing::ValuesIn(large_reduce_params()),
                         reduce_name);

class ReduceScatterTest : public WorldTestP<ReduceParam> {};

TEST_P(ReduceScatterTest, MatchesSerialReference) {
  auto [dtype, op, count, in_place] = GetParam();
  const int n = comm().size(), r = comm().rank();
  Placed in(dtype, count * n), out(dtype, count);
  in.host.fill_rank(r, 0);
  in.push();
  if (in_place) {
    comm().reduce_scatter(in.view(), in.view(r * count, count), op)->wait();
    in.pull();
    Buffer slice(dtype, count);
    if (count != 0) std::memcpy(slice.bytes.data(), in.host.at(r * count), slice.bytes.size());
    expect_reduced(slice, r * count, op, n);
  } else {
    comm().reduce_scatter(in.view(), out.view(), op)->wait();
    out.pull();
    expect_reduced(out.host, r * count, op, n);
  }
}

INSTANTIATE_TEST_SUITE_P(All, ReduceScatterTest, ::testing::ValuesIn(reduce_params()), reduce_name);
INSTANTIATE_TEST_SUITE_P(Large, ReduceScatterTest, ::testing::ValuesIn(large_reduce_params()),
                         reduce_name);

using MoveParam = std::tuple<DType, std::size_t, bool>;

std::string move_name(const ::testing::TestParamInfo<MoveParam>& info) {
  auto [dtype, count, flag] = info.param;
  return std::string(to_string(dtype)) + "_" + std::to_string(count) + (flag ? "_a" : "_b");
}

const auto kMoveParams = ::testing::Combine(::testing::ValuesIn(kDTypes),
                                            ::testing::ValuesIn(kCounts), ::testing::Bool());

class AllGatherTest : public WorldTestP<MoveParam> {};

TEST_P(AllGatherTest, ConcatenatesEveryRanksInput) {
  auto [dtype, count, in_place] = GetParam();
  const int n = comm().size(), r = comm().rank();
  Placed in(dtype, count), out(dtype, count * n);
  in.host.fill_rank(r, 0);
  in.push();
  if (in_place) {
    if (count != 0) std::memcpy(out.host.at(r * count), in.host.bytes.data(), in.host.bytes.size());
    out.push();
    comm().all_gather(out.view(r * count, count), out.view())->wait();
  } else {
    comm().all_gather(in.view(), out.view())->wait();
  }
  out.pull();
  for (int peer = 0; peer < n; ++peer) {
    Buffer expected(dtype, count);
    expected.fill_rank(peer, 0);
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out.host.get(peer * count + i), expected.get(i))
          << "rank " << peer << " elem " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, AllGatherTest, kMoveParams, move_name);
INSTANTIATE_TEST_SUITE_P(Large, AllGatherTest,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(kLargeCounts), ::testing::Bool()),
                         move_name);

class BroadcastTest : public WorldTestP<MoveParam> {};

TEST_P(BroadcastTest, EveryRankGetsTheRootsBuffer) {
  auto [dtype, count, last_root] = GetParam();
  const int n = comm().size(), r = comm().rank();
  const int root = last_root ? n - 1 : 0;
  Placed buf(dtype, count);
  buf.host.fill_rank(r, 0);
  buf.push();
  comm().broadcast(buf.view(), root)->wait();
  buf.pull();
  Buffer expected(dtype, count);
  expected.fill_rank(root, 0);
  EXPECT_EQ(buf.host.bytes, expected.bytes);
}

INSTANTIATE_TEST_SUITE_P(All, BroadcastTest, kMoveParams, move_name);

using BlockParam = std::tuple<DType, std::size_t>;

std::string block_name(const ::testing::TestParamInfo<BlockParam>& info) {
  auto [dtype, block] = info.param;
  return std::string(to_string(dtype)) + "_" + std::to_string(block);
}

class AllToAllTest : public WorldTestP<BlockParam> {};

TEST_P(AllToAllTest, BlockJGoesToRankJ) {
  auto [dtype, block] = GetParam();
  const int n = comm().size(), r = comm().rank();
  Placed in(dtype, block * n), out(dtype, block * n);
  in.host.fill_rank(r, 0);
  in.push();
  comm().all_to_all(in.view(), out.view())->wait();
  out.pull();
  for (int peer = 0; peer < n; ++peer) {
    Buffer theirs(dtype, block * n);
    theirs.fill_rank(peer, 0);
    for (std::size_t i = 0; i < block; ++i) {
      ASSERT_EQ(out.host.get(peer * block + i), theirs.get(r * block + i)) << "from " << peer;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, AllToAllTest,
                         ::testing::Combine(::testing::ValuesIn(kDTypes),
                                            ::testing::ValuesIn(kCounts)),
                         block_name);

class PointToPoint : public WorldTest {};

TEST_F(PointToPoint, RingSendRecvDeliversEachNeighboursBuffer) {
  const int n = comm().size(), r = comm().rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  for (std::size_t count : kCounts) {
    Placed mine(DType::kFloat32, count), theirs(DType::kFloat32, count);
    mine.host.fill_rank(r, 0);
    mine.push();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    // Inside a group every rank may post its send first: the group lets them progress together.
    comm()
        .group([&] {
          comm().send(mine.view(), next, 5);
          comm().recv(theirs.view(), prev, 5);
        })
        ->wait();
    theirs.pull();
    Buffer expected(DType::kFloat32, count);
    expected.fill_rank(prev, 0);
    EXPECT_EQ(theirs.host.bytes, expected.bytes) << "count " << count;
  }
}

class Barrier : public WorldTest {};

// No rank leaves before the last one arrived: each round one rank comes
// 200 ms late, says when in the store, and every rank checks that it left
// after that moment (the ranks share a host and its clock).
TEST_F(Barrier, NoRankLeavesBeforeTheLastArrives) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  auto now_us = [] {
    return duration_cast<microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  Store& store = test_context()->store();
  const int n = comm().size(), rank = comm().rank();
  for (int i = 0; i < 3; ++i) {
    const int late = i % n;
    if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string key = "barrier_test/" + std::to_string(i) + "/";
    store.set(key + std::to_string(rank), std::to_string(now_us()));
    comm().barrier()->wait();
    const long long left = now_us();
    for (int r = 0; r < n; ++r) {
      const long long arrived =
          std::stoll(store.get(key + std::to_string(r), std::chrono::seconds(30)));
      EXPECT_GE(left, arrived) << "round " << i << ": rank " << rank << " left the barrier "
                               << (arrived - left) / 1000 << " ms before rank " << r << " came";
    }
  }
  comm().barrier()->wait();  // every rank read the keys before any round's can go
}

class AsyncWork : public WorldTest {};

TEST_F(AsyncWork, SeveralOperationsInFlightAllComplete) {
  const int n = comm().size();
  std::vector<std::unique_ptr<Placed>> bufs;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 8; ++i) {
    bufs.push_back(std::make_unique<Placed>(DType::kFloat32, 4096));
    for (std::size_t j = 0; j < 4096; ++j) bufs.back()->host.set(j, i + 1);
    bufs.back()->push();
    works.push_back(comm().all_reduce(bufs.back()->view(), ReduceOp::kSum));
  }
  for (auto& w : works) w->wait();
  for (int i = 0; i < 8; ++i) {
    bufs[i]->pull();
    EXPECT_EQ(bufs[i]->host.get(17), static_cast<double>((i + 1) * n));
  }
  for (auto& w : works) {
    EXPECT_TRUE(w->done());
    EXPECT_FALSE(w->error().has_value());
  }
}

class Split : public WorldTest {};

TEST_F(Split, EvenAndOddRanksReduceApart) {
  const int n = comm().size(), r = comm().rank();
  auto sub = comm().split(r % 2, r);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), (n + 1 - r % 2) / 2);
  EXPECT_EQ(sub->rank(), r / 2);
  Placed v(DType::kInt64, 3);
  for (int i = 0; i < 3; ++i) v.host.set(i, r);
  v.push();
  sub->all_reduce(v.view(), ReduceOp::kSum)->wait();
  v.pull();
  long expected = 0;
  for (int peer = r % 2; peer < n; peer += 2) expected += peer;
  EXPECT_EQ(v.host.get(2), static_cast<double>(expected));
  // A rank with a negative color joins no communicator.
  auto none = comm().split(r == 0 ? -1 : 0, r);
  EXPECT_EQ(none == nullptr, r == 0);
  if (none) {
    EXPECT_EQ(none->size(), n - 1);
    none->barrier()->wait();
  }
}

class BadArguments : public WorldTest {};

TEST_F(BadArguments, WrongSizesAreRejectedBeforeAnythingIsSent) {
  const int n = comm().size();
  Placed a(DType::kFloat32, 10), b(DType::kFloat32, 11), big(DType::kFloat32, 10 * n + 1);
  Placed ints(DType::kInt32, 4), d(DType::kFloat64, 10);
  auto expect_invalid = [](auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "expected rtd::Error";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
    }
  };
  expect_invalid([&] { comm().all_reduce(a.view(), b.view(), ReduceOp::kSum); });
  expect_invalid([&] { comm().all_gather(a.view(), b.view()); });
  expect_invalid([&] { comm().reduce_scatter(big.view(), a.view(), ReduceOp::kSum); });
  expect_invalid([&] { comm().broadcast(a.view(), n); });
  expect_invalid([&] { comm().send(a.view(), comm().rank(), 0); });
  expect_invalid([&] { comm().all_reduce(ints.view(), ReduceOp::kAvg); });
  expect_invalid([&] { comm().all_reduce(a.view(), d.view(), ReduceOp::kSum); });
  expect_invalid([&] { comm().all_to_all(big.view(), big.view()); });
  // Host memory to the GPU backend (or GPU memory to the CPU one) is refused.
  std::vector<float> host(4);
  BufferView wrong = view(host.data(), host.size());
  if (test_memory().device() == DeviceType::kCpu) wrong.device = DeviceType::kCuda;
  expect_invalid([&] { comm().all_reduce(wrong, ReduceOp::kSum); });
  comm().barrier()->wait();  // the communicator still works
}

// The MPI backend's device path: without CUDA-aware Open MPI a device buffer
// is refused naming it; an average (or a 16-bit float) on device buffers is
// refused on any Open MPI, before MPI or the host touch the buffer (the
// average was once divided through the device pointer on the queue thread).
TEST_F(BadArguments, MpiRefusesWhatItCannotDoOnDeviceBuffers) {
  if (comm().backend() != "mpi") GTEST_SKIP() << "the MPI backend's checks";
  // Never dereferenced: the checks come first.
  BufferView device{reinterpret_cast<void*>(0x10), 8, DType::kFloat32, DeviceType::kCuda, 0};
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "expected rtd::Error";
    return "";
  };
  for (auto* fn : {+[](Communicator&c, BufferView b) { c.all_reduce(b, ReduceOp::kAvg); },
                   +[](Communicator&c, BufferView b) {
                     BufferView out = b;
                     out.count = b.count / static_cast<std::size_t>(c.size());
                     c.reduce_scatter(b, out, ReduceOp::kAvg);
                   }}) {
    EXPECT_NE(message([&] { fn(comm(), device); }).find("averages on the host only"),
              std::string::npos);
  }
  BufferView half = device;
  half.dtype = DType::kBFloat16;
  EXPECT_NE(message([&] { comm().all_reduce(half, ReduceOp::kSum); }).find("bfloat16"),
            std::string::npos);
  comm().barrier()->wait();  // the communicator still works
}

class Timeout : public WorldTest {
 protected:
  // A communicator of its own beside the test world's, with a short timeout.
  std::unique_ptr<Communicator> short_lived_comm(
      const std::string& prefix, std::chrono::milliseconds timeout,
      std::chrono::milliseconds hang_warn = std::chrono::seconds(60),
      bool check_collectives = false) {
    Config config = Config::from_env(read_process_env());
    return make_communicator(CommunicatorOptions{
        .backend = comm().backend(),
        .store = make_prefix_store(prefix,
                                   std::shared_ptr<Store>(&test_context()->store(), [](Store*) {})),
        .rank = comm().rank(),
        .size = comm().size(),
        .host = data_host(config, test_context()->world()),
        .device = test_context()->local_rank(),
        .timeout = timeout,
        .flight = {.hang_warn = hang_warn},
        .check_collectives = check_collectives,
    });
  }
  // A rank waiting on a collective that a peer never calls fails with its
  // own timeout or, under Gloo, when a neighbour timed out first and closed
  // its side of the connection, with a backend error that says so (a loaded
  // machine spreads the ranks' deadlines); both carry the same diagnosis.
  // Returns whether it was the rank's own timeout.
  static bool expect_timeout_or_peer_closed(const Error& e) {
    const std::string what = e.what();
    const bool peer_closed = e.category() == ErrorCategory::kBackend &&
                             what.find("a peer rank closed its connection") != std::string::npos;
    EXPECT_TRUE(e.category() == ErrorCategory::kTimeout || peer_closed) << what;
    return e.category() == ErrorCategory::kTimeout;
  }
  // Until the counter under key reaches n (at most 60 s, so that a failure
  // elsewhere cannot hang the test).
  static void wait_for_count(Store& store, const std::string& key, int n) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (store.add(key, 0) < n && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
};

TEST_F(Timeout, AllReduceThatOneRankNeverCallsFailsWithinItsDeadline) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  auto short_comm = short_lived_comm("comm/timeout-test", std::chrono::milliseconds(3000));
  Placed buf(DType::kFloat32, 16);
  buf.push();
  Store& store = test_context()->store();
  if (comm().rank() != 0) {
    auto start = std::chrono::steady_clock::now();
    try {
      // NCCL may already fail in the call (connecting to a peer that never
      // comes), Gloo in the wait; either way within the 3 s deadline.
      short_comm->all_reduce(buf.view(), ReduceOp::kSum)->wait();
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      if (expect_timeout_or_peer_closed(e)) store.add("timeout_test/timed_out", 1);
      const std::string what = e.what();
      if (comm().backend() == "gloo") {
        EXPECT_NE(what.find("rank 0 has called no collective on this communicator"),
                  std::string::npos)
            << what;
      }
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
    store.add("timeout_test/failed", 1);
  }
  // Rank 0 stands for the rank that never called: it learns that the others
  // gave up through the store (not through the communicator under test) and
  // aborts its side too, as a job's watchdog would. No rank closes its side
  // before every waiting rank has seen its own timeout.
  wait_for_count(store, "timeout_test/failed", comm().size() - 1);
  if (comm().rank() != 0) {
    EXPECT_GE(store.add("timeout_test/timed_out", 0), 1);
  }
  if (comm().rank() == 0) short_comm->abort();
  short_comm.reset();
  comm().barrier()->wait();
}

// Ranks that call one collective with different counts fail on every rank
// with an error naming both calls, instead of one rank ending in Gloo's
// uncaught assertion (a message longer than its buffer) and the other
// returning a partly reduced result: their tags differ (GlooCommunicator::
// next_tag). NCCL has no such check (it reduces the shorter count).
TEST_F(Timeout, GlooCallsThatDifferInCountFailOnEveryRank) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  if (comm().backend() != "gloo") GTEST_SKIP() << "Gloo's tags";
  auto short_comm = short_lived_comm("comm/count-mismatch", std::chrono::milliseconds(4000),
                                     std::chrono::milliseconds(1500));
  comm().barrier()->wait();
  Placed buf(DType::kFloat32, 8 + 8 * comm().rank());
  buf.push();
  try {
    short_comm->all_reduce(buf.view(), ReduceOp::kSum)->wait();
    ADD_FAILURE() << "calls of different counts succeeded";
  } catch (const Error& e) {
    expect_timeout_or_peer_closed(e);
    const std::string what = e.what();
    const std::string other = comm().rank() == 0 ? "x 16" : "x 8";
    EXPECT_NE(what.find("called #1 all_reduce (float32 " + other), std::string::npos) << what;
  }
  short_comm->abort();
  short_comm.reset();
  comm().barrier()->wait();
}

// The timeout names the rank that did not call the collective, and what it
// called last (the flight recorder's diagnosis from every rank's report).
TEST_F(Timeout, NamesTheRankThatDidNotCallTheCollective) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  // Well past the recorder's publish interval (1 s), for a loaded machine; the
  // live warning (after 1.5 s) shows in the log.
  auto short_comm = short_lived_comm("comm/flight-test", std::chrono::milliseconds(5000),
                                     std::chrono::milliseconds(1500));
  Placed buf(DType::kFloat32, 16);
  buf.push();
  Store& store = test_context()->store();
  // Every rank reaches the end barrier whatever fails here, so that a failure
  // cannot leave the test world's collectives out of step for the tests after.
  try {
    short_comm->all_reduce(buf.view(), ReduceOp::kSum)->wait();  // #1, on every rank
  } catch (const Error& e) {
    ADD_FAILURE() << "the first all-reduce failed: " << e.what();
  }
  if (comm().rank() != 0) {
    try {
      short_comm->all_reduce(buf.view(), ReduceOp::kSum)->wait();  // #2: rank 0 never calls it
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      if (expect_timeout_or_peer_closed(e)) store.add("flight_test/timed_out", 1);
      EXPECT_NE(std::string(e.what()).find(
                    "rank 0 has not called it; its last was #1 all_reduce (float32 x 16, sum)"),
                std::string::npos)
          << e.what();
    }
    store.add("flight_test/failed", 1);
  }
  wait_for_count(store, "flight_test/failed", comm().size() - 1);
  // Whoever heard of a closed connection heard it from a rank that timed out.
  if (comm().rank() != 0) {
    EXPECT_GE(store.add("flight_test/timed_out", 0), 1);
  }
  if (comm().rank() == 0) short_comm->abort();
  short_comm.reset();
  comm().barrier()->wait();
}

// RTD_CHECK_COLLECTIVES: ranks that call different collectives (or the same
// with different sizes) fail at the call, on every rank, naming each rank's
// call; nothing was launched, so the communicator stays usable.
class CheckedCollectives : public Timeout {};

TEST_F(CheckedCollectives, DisagreementFailsAtTheCallOnEveryRank) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  auto checked = short_lived_comm("comm/checked-test", std::chrono::seconds(30),
                                  std::chrono::seconds(60), /*check_collectives=*/true);
  Placed buf(DType::kFloat32, 16);
  buf.push();
  try {
    checked->all_reduce(buf.view(), ReduceOp::kSum)->wait();  // #1: every rank alike
  } catch (const Error& e) {
    ADD_FAILURE() << "the first all-reduce failed: " << e.what();
  }
  auto expect_refused = [&](const std::function<void()>& call, const std::string& names) {
    try {
      call();
      ADD_FAILURE() << "expected the check to refuse the call";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("ranks disagree"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  // #2: rank 1 broadcasts where the others all-reduce.
  expect_refused(
      [&] {
        if (comm().rank() == 1)
          checked->broadcast(buf.view(), 0);
        else
          checked->all_reduce(buf.view(), ReduceOp::kSum);
      },
      "rank 0 all_reduce (float32 x 16, sum); rank 1 broadcast (float32 x 16, root 0)");
  // #3: the same operation over different counts.
  expect_refused(
      [&] { checked->all_reduce(buf.view(0, comm().rank() == 1 ? 8 : 16), ReduceOp::kSum); },
      "rank 1 all_reduce (float32 x 8, sum)");
  try {
    checked->all_reduce(buf.view(), ReduceOp::kSum)->wait();  // #4: still usable
  } catch (const Error& e) {
    ADD_FAILURE() << "the communicator did not stay usable: " << e.what();
  }
  checked.reset();
  comm().barrier()->wait();
}

TEST_F(CheckedCollectives, ARankThatNeverCallsIsNamedAtTheDeadline) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  auto checked = short_lived_comm("comm/checked-missing", std::chrono::milliseconds(3000),
                                  std::chrono::seconds(60), /*check_collectives=*/true);
  // Every rank has its side of the mesh before rank 0 (which calls nothing)
  // can let go of it: a rank still connecting once found its peer closed.
  comm().barrier()->wait();
  Placed buf(DType::kFloat32, 16);
  buf.push();
  if (comm().rank() != 0) {  // rank 0 never calls
    try {
      checked->all_reduce(buf.view(), ReduceOp::kSum);
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kTimeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 0 did not make a collective call #1"),
                std::string::npos)
          << e.what();
    }
  }
  checked.reset();
  comm().barrier()->wait();
}

}  // namespace
}  // namespace rtd::testing_util
