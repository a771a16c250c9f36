#include "launcher/round.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "rt_dist/error.h"

namespace rtd::launcher {
namespace {

using Clock = std::chrono::system_clock;

proto::JoinRequest request(const std::string& host, int node_rank, int nnodes = 2, int nproc = 4,
                           const std::string& fp = "f") {
  proto::JoinRequest r;
  r.set_host(host);
  r.set_node_rank(node_rank);
  r.set_nnodes(nnodes);
  r.set_nproc_per_node(nproc);
  r.set_fingerprint(fp);
  return r;
}

RoundConfig config() {
  return RoundConfig{
      .nnodes = 2, .nproc_per_node = 4, .fingerprint = "f", .master_port = 1234, .run_id = "run"};
}

TEST(Round, TwoNodesGetTheSameLayoutAndTheirRanks) {
  Round round(config());
  auto deadline = Clock::now() + std::chrono::seconds(5);
  auto second =
      std::async(std::launch::async, [&] { return round.join(request("b", -1), deadline); });
  proto::JoinResponse first = round.join(request("a", 0), deadline);
  proto::JoinResponse other = second.get();
  EXPECT_EQ(first.node_rank(), 0);
  EXPECT_EQ(other.node_rank(), 1);
  EXPECT_EQ(first.world_size(), 8);
  EXPECT_EQ(first.master_addr(), "a");
  EXPECT_EQ(first.master_port(), 1234);
  EXPECT_EQ(other.nnodes(), 2);
  EXPECT_EQ(other.node().host(), "b");
  EXPECT_EQ(other.node().first_rank(), 4);
  EXPECT_EQ(first.node().first_rank(), 0);
}

// Nodes without --node-rank are numbered by address, whatever their arrival order.
TEST(Round, NodesWithoutARankAreNumberedByAddress) {
  RoundConfig c = config();
  c.nnodes = 4;
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  std::vector<std::future<proto::JoinResponse>> joins;
  for (const char* host : {"10.0.0.9", "10.0.0.3", "10.0.0.5"}) {
    joins.push_back(std::async(std::launch::async,
                               [&, host] { return round.join(request(host, -1, 4), deadline); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  proto::JoinResponse host = round.join(request("10.0.0.7", 0, 4), deadline);
  EXPECT_EQ(host.node_rank(), 0);
  EXPECT_EQ(joins[1].get().node_rank(), 1);  // 10.0.0.3
  EXPECT_EQ(joins[2].get().node_rank(), 2);  // 10.0.0.5
  EXPECT_EQ(joins[0].get().node_rank(), 3);  // 10.0.0.9, first to arrive
}

void expect_round_fails(proto::JoinRequest bad, const std::string& needle) {
  Round round(config());
  auto deadline = Clock::now() + std::chrono::seconds(10);
  auto host = std::async(std::launch::async, [&] { return round.join(request("a", 0), deadline); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  try {
    round.join(bad, deadline);
    ADD_FAILURE() << "expected the joiner to fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  // The waiting host fails with the same explanation, at once, not at its deadline.
  try {
    host.get();
    ADD_FAILURE() << "expected the host to fail too";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now(), deadline);
}

TEST(Round, DisagreementOnNprocFailsEveryNode) {
  expect_round_fails(request("b", 1, 2, 8), "--nproc-per-node=8");
}

TEST(Round, DisagreementOnNnodesFailsEveryNode) {
  expect_round_fails(request("b", 1, 3, 4), "--nnodes=3");
}

TEST(Round, DuplicateNodeRankFailsEveryNode) {
  expect_round_fails(request("b", 0), "both asked for --node-rank=0");
}

TEST(Round, DifferentConfigurationFailsEveryNode) {
  expect_round_fails(request("b", 1, 2, 4, "other"), "different configuration");
}

TEST(Round, MissingNodeTimesOutNamingWhoJoined) {
  Round round(config());
  try {
    round.join(request("10.0.0.1", 0), Clock::now() + std::chrono::milliseconds(100));
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("only 1 of 2 nodes joined"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("10.0.0.1"), std::string::npos) << e.what();
  }
}

TEST(Round, ExtraNodeAfterTheRoundClosedIsRejected) {
  Round round(RoundConfig{.nnodes = 1, .nproc_per_node = 4, .fingerprint = "f"});
  round.join(request("a", 0, 1), Clock::now() + std::chrono::seconds(1));
  EXPECT_THROW(round.join(request("b", -1, 1), Clock::now() + std::chrono::seconds(1)), Error);
}

}  // namespace
}  // namespace rtd::launcher
