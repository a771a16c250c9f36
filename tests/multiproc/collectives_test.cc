// Every collective x dtype x size x in-place, on the ranks dtrun started,
// checked against a serial reference that each rank computes for all ranks.
// Every rank runs the same tests in the same order (gtest's order is fixed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "collectives/factory.h"
#include "runtime/core/config.h"
#include "rt_dist/rt_dist.h"
#include "tests/testing/values.h"

namespace rtd {
namespace {

std::shared_ptr<Context> g_ctx;

Communicator& comm() { return g_ctx->comm(); }

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                         DType::kBFloat16};
const std::size_t kCounts[] = {0, 1, 7, 1000, 65537};

using ReduceParam = std::tuple<DType, ReduceOp, std::size_t, bool>;

std::string reduce_name(const testing::TestParamInfo<ReduceParam>& info) {
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

class AllReduceTest : public testing::TestWithParam<ReduceParam> {};

TEST_P(AllReduceTest, MatchesSerialReference) {
  auto [dtype, op, count, in_place] = GetParam();
  const int n = comm().size(), r = comm().rank();
  testing_util::Buffer in(dtype, count), out(dtype, count);
  in.fill_rank(r, 0);
  if (in_place) {
    comm().all_reduce(in.view(), op)->wait();
  } else {
    comm().all_reduce(in.view(), out.view(), op)->wait();
    testing_util::Buffer original(dtype, count);
    original.fill_rank(r, 0);
    EXPECT_EQ(in.bytes, original.bytes) << "out-of-place all_reduce changed its input";
  }
  const testing_util::Buffer& result = in_place ? in : out;
  for (std::size_t i = 0; i < count; ++i) {
    double expected = testing_util::reduce_reference(op, n, i, 0);
    ASSERT_NEAR(result.get(i), testing_util::round_to(dtype, expected),
                testing_util::tolerance(dtype, expected))
        << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, AllReduceTest,
    testing::ValuesIn(reduce_params()), reduce_name);

class ReduceScatterTest : public testing::TestWithParam<ReduceParam> {};

TEST_P(ReduceScatterTest, MatchesSerialReference) {
  auto [dtype, op, count, in_place] = GetParam();
  const int n = comm().size(), r = comm().rank();
  testing_util::Buffer in(dtype, count * n), out(dtype, count);
  in.fill_rank(r, 0);
  BufferView out_view = out.view();
  if (in_place) out_view.data = in.at(r * count);
  comm().reduce_scatter(in.view(), out_view, op)->wait();
  testing_util::Buffer result(dtype, count);
  std::memcpy(result.bytes.data(), out_view.data, count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    double expected = testing_util::reduce_reference(op, n, r * count + i, 0);
    ASSERT_NEAR(result.get(i), testing_util::round_to(dtype, expected),
                testing_util::tolerance(dtype, expected))
        << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, ReduceScatterTest,
    testing::ValuesIn(reduce_params()), reduce_name);

using MoveParam = std::tuple<DType, std::size_t, bool>;

std::string move_name(const testing::TestParamInfo<MoveParam>& info) {
  auto [dtype, count, flag] = info.param;
  return std::string(to_string(dtype)) + "_" + std::to_string(count) + (flag ? "_a" : "_b");
}

class AllGatherTest : public testing::TestWithParam<MoveParam> {};

TEST_P(AllGatherTest, ConcatenatesEveryRanksInput) {
  auto [dtype, count, in_place] = GetParam();
  const int n = comm().size(), r = comm().rank();
  testing_util::Buffer in(dtype, count), out(dtype, count * n);
  in.fill_rank(r, 0);
  BufferView in_view = in.view();
  if (in_place) {
    std::memcpy(out.at(r * count), in.bytes.data(), in.bytes.size());
    in_view.data = out.at(r * count);
  }
  comm().all_gather(in_view, out.view())->wait();
  for (int peer = 0; peer < n; ++peer) {
    testing_util::Buffer expected(dtype, count);
    expected.fill_rank(peer, 0);
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out.get(peer * count + i), expected.get(i)) << "rank " << peer << " elem " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, AllGatherTest,
                         testing::Combine(testing::ValuesIn(kDTypes), testing::ValuesIn(kCounts),
                                          testing::Bool()),
                         move_name);

class BroadcastTest : public testing::TestWithParam<MoveParam> {};

TEST_P(BroadcastTest, EveryRankGetsTheRootsBuffer) {
  auto [dtype, count, last_root] = GetParam();
  const int n = comm().size(), r = comm().rank();
  const int root = last_root ? n - 1 : 0;
  testing_util::Buffer buf(dtype, count);
  buf.fill_rank(r, 0);
  comm().broadcast(buf.view(), root)->wait();
  testing_util::Buffer expected(dtype, count);
  expected.fill_rank(root, 0);
  EXPECT_EQ(buf.bytes, expected.bytes);
}

INSTANTIATE_TEST_SUITE_P(Gloo, BroadcastTest,
                         testing::Combine(testing::ValuesIn(kDTypes), testing::ValuesIn(kCounts),
                                          testing::Bool()),
                         move_name);

TEST(PointToPoint, RingSendRecvDeliversEachNeighboursBuffer) {
  const int n = comm().size(), r = comm().rank();
  for (std::size_t count : kCounts) {
    testing_util::Buffer mine(DType::kFloat32, count), theirs(DType::kFloat32, count);
    mine.fill_rank(r, 0);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    // Even ranks send first, odd ranks receive first, so no pair waits on itself.
    std::shared_ptr<Work> a, b;
    if (r % 2 == 0) {
      a = comm().send(mine.view(), next, 5);
      b = comm().recv(theirs.view(), prev, 5);
    } else {
      b = comm().recv(theirs.view(), prev, 5);
      a = comm().send(mine.view(), next, 5);
    }
    a->wait();
    b->wait();
    testing_util::Buffer expected(DType::kFloat32, count);
    expected.fill_rank(prev, 0);
    EXPECT_EQ(theirs.bytes, expected.bytes) << "count " << count;
  }
}

TEST(Barrier, EveryRankPassesIt) {
  for (int i = 0; i < 5; ++i) comm().barrier()->wait();
}

TEST(AsyncWork, SeveralOperationsInFlightCompleteInOrder) {
  const int n = comm().size();
  std::vector<std::vector<float>> bufs(8, std::vector<float>(4096, 1.0f));
  std::vector<std::shared_ptr<Work>> works;
  for (auto& b : bufs) works.push_back(comm().all_reduce(view(b.data(), b.size()), ReduceOp::kSum));
  for (auto& w : works) w->wait();
  for (auto& b : bufs) EXPECT_EQ(b[17], static_cast<float>(n));
  for (auto& w : works) {
    EXPECT_TRUE(w->done());
    EXPECT_FALSE(w->error().has_value());
  }
}

TEST(BadArguments, WrongSizesAreRejectedBeforeAnythingIsSent) {
  const int n = comm().size();
  std::vector<float> a(10), b(11), big(10 * n + 1);
  auto expect_invalid = [](auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "expected rtd::Error";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument) << e.what();
    }
  };
  expect_invalid([&] { comm().all_reduce(view(a.data(), 10), view(b.data(), 11), ReduceOp::kSum); });
  expect_invalid([&] { comm().all_gather(view(a.data(), 10), view(b.data(), 11)); });
  expect_invalid([&] { comm().reduce_scatter(view(big.data(), big.size()), view(a.data(), 10), ReduceOp::kSum); });
  expect_invalid([&] { comm().broadcast(view(a.data(), 10), n); });
  expect_invalid([&] { comm().send(view(a.data(), 10), comm().rank(), 0); });
  std::vector<std::int32_t> ints(4);
  expect_invalid([&] { comm().all_reduce(view(ints.data(), 4), ReduceOp::kAvg); });
  std::vector<double> d(10);
  expect_invalid([&] { comm().all_reduce(view(a.data(), 10), view(d.data(), 10), ReduceOp::kSum); });
  // The communicator still works afterwards.
  comm().barrier()->wait();
}

TEST(Timeout, AllReduceThatOneRankNeverCallsFailsWithinItsDeadline) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  auto short_comm = make_communicator(CommunicatorOptions{
      .backend = "gloo",
      .store = make_prefix_store("comm/timeout-test", std::shared_ptr<Store>(&g_ctx->store(), [](Store*) {})),
      .rank = comm().rank(),
      .size = comm().size(),
      .host = Config::from_env(read_process_env()).node_addr,
      .timeout = std::chrono::milliseconds(1500),
  });
  std::vector<float> buf(16, 1.0f);
  if (comm().rank() != 0) {
    auto work = short_comm->all_reduce(view(buf.data(), buf.size()), ReduceOp::kSum);
    auto start = std::chrono::steady_clock::now();
    try {
      work->wait(std::chrono::seconds(30));
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kTimeout) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  }
  comm().barrier()->wait();
}

}  // namespace
}  // namespace rtd

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  try {
    rtd::g_ctx = rtd::init();
  } catch (const rtd::Error& e) {
    std::fprintf(stderr, "init failed: %s\n", e.what());
    return 1;
  }
  int rc = RUN_ALL_TESTS();
  rtd::g_ctx.reset();
  return rc;
}
