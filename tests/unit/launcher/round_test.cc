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
  r.set_min_nodes(nnodes);
  r.set_node_id("id-" + host);
  r.set_nproc_per_node(nproc);
  r.set_fingerprint(fp);
  return r;
}

RoundConfig config() {
  return RoundConfig{.min_nodes = 2,
                     .max_nodes = 2,
                     .nproc_per_node = 4,
                     .fingerprint = "f",
                     .master_port = 1234,
                     .run_id = "run"};
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
  c.min_nodes = c.max_nodes = 4;
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

RoundConfig elastic_config();

// A join that disagrees with the host is turned away alone, at once: the
// host goes on waiting, and a node that agrees still completes the round.
void expect_turned_away_alone(proto::JoinRequest bad, const std::string& needle) {
  Round round(config());
  auto deadline = Clock::now() + std::chrono::seconds(10);
  auto host = std::async(std::launch::async, [&] { return round.join(request("a", 0), deadline); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  try {
    round.join(bad, deadline);
    ADD_FAILURE() << "expected the joiner to be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(host.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "the host must not fail because of another's join";
  EXPECT_EQ(round.join(request("c", 1), deadline).nnodes(), 2);
  EXPECT_EQ(host.get().nnodes(), 2);
}

TEST(Round, DisagreementOnNprocTurnsTheJoinerAwayAlone) {
  expect_turned_away_alone(request("b", 1, 2, 8), "--nproc-per-node=8");
}

TEST(Round, DisagreementOnNnodesTurnsTheJoinerAwayAlone) {
  expect_turned_away_alone(request("b", 1, 3, 4), "--nnodes=3");
}

TEST(Round, ADuplicateNodeRankIsRefusedToTheSecond) {
  expect_turned_away_alone(request("b", 0), "both asked for --node-rank=0");
}

TEST(Round, DifferentConfigurationTurnsTheJoinerAwayAlone) {
  expect_turned_away_alone(request("b", 1, 2, 4, "other"), "different configuration");
}

TEST(Round, ASecondJoinOfTheSameAgentIsRefused) {
  proto::JoinRequest again = request("a", 1);
  expect_turned_away_alone(again, "has already joined");
}

// Rank 0 is the host's: a stranger that asks for it first does not take it.
TEST(Round, RankZeroIsTheHostsEvenWhenAnotherAsksFirst) {
  RoundConfig c = config();
  c.host_node_id = "id-a";
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  EXPECT_THROW(round.join(request("stranger", 0), deadline), Error);
  auto b = std::async(std::launch::async, [&] { return round.join(request("b", -1), deadline); });
  EXPECT_EQ(round.join(request("a", 0), deadline).node_rank(), 0);
  EXPECT_EQ(b.get().node_rank(), 1);
}

// The timeout of those that wait says who was turned away, and why.
TEST(Round, TheTimeoutNamesTheRefusedJoins) {
  Round round(config());
  EXPECT_THROW(round.join(request("10.0.0.7", 1, 2, 8), Clock::now() + std::chrono::seconds(1)),
               Error);
  try {
    round.join(request("10.0.0.1", 0), Clock::now() + std::chrono::milliseconds(100));
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("refused: node at 10.0.0.7"), std::string::npos)
        << e.what();
  }
}

// --nnodes=1:4 closing with 2 nodes: a node that asked for --node-rank=3
// is turned away, the others start (it crashed the host before).
TEST(Round, ARankTheClosingRoundCannotHoldIsTurnedAwayAlone) {
  RoundConfig c = elastic_config();
  c.min_nodes = 1;
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  auto ask = [](const std::string& host, int rank) {
    proto::JoinRequest r = request(host, rank, 4);
    r.set_min_nodes(1);
    return r;
  };
  auto high = std::async(std::launch::async, [&] { return round.join(ask("x", 3), deadline); });
  auto b = std::async(std::launch::async, [&] { return round.join(ask("b", -1), deadline); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  proto::JoinResponse a = round.join(ask("a", 0), deadline);
  EXPECT_EQ(a.nnodes(), 2);
  EXPECT_EQ(b.get().node_rank(), 1);
  try {
    high.get();
    FAIL() << "expected node x to be turned away";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--node-rank=3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("closed with 2 node(s)"), std::string::npos) << e.what();
  }
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
  Round round(RoundConfig{.min_nodes = 1, .max_nodes = 1, .nproc_per_node = 4, .fingerprint = "f"});
  round.join(request("a", 0, 1), Clock::now() + std::chrono::seconds(1));
  EXPECT_THROW(round.join(request("b", -1, 1), Clock::now() + std::chrono::seconds(1)), Error);
}

proto::JoinRequest elastic(const std::string& host, int node_rank = -1) {
  proto::JoinRequest r = request(host, node_rank, 4);
  r.set_min_nodes(2);
  return r;
}

RoundConfig elastic_config() {
  RoundConfig c = config();
  c.min_nodes = 2;
  c.max_nodes = 4;
  c.last_call = std::chrono::milliseconds(200);
  return c;
}

// --nnodes=2:4: two nodes start the job once the last call passed.
TEST(Round, ElasticRoundClosesAfterTheLastCallWithTheMinimum) {
  Round round(elastic_config());
  auto deadline = Clock::now() + std::chrono::seconds(10);
  auto second = std::async(std::launch::async, [&] { return round.join(elastic("b"), deadline); });
  const auto start = Clock::now();
  proto::JoinResponse first = round.join(elastic("a", 0), deadline);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150)) << "closed before the last call";
  EXPECT_EQ(first.nnodes(), 2);
  EXPECT_EQ(first.world_size(), 8);
  EXPECT_EQ(second.get().node_rank(), 1);
}

TEST(Round, ElasticRoundClosesAtOnceWithTheMaximum) {
  RoundConfig c = elastic_config();
  c.last_call = std::chrono::seconds(60);
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  std::vector<std::future<proto::JoinResponse>> joins;
  for (const char* host : {"b", "c", "d"})
    joins.push_back(
        std::async(std::launch::async, [&, host] { return round.join(elastic(host), deadline); }));
  EXPECT_EQ(round.join(elastic("a", 0), deadline).nnodes(), 4);
  for (auto& j : joins) EXPECT_EQ(j.get().nnodes(), 4);
}

TEST(Round, DisagreementOnTheRangeTurnsTheJoinerAwayAlone) {
  Round round(elastic_config());
  auto deadline = Clock::now() + std::chrono::seconds(10);
  auto host = std::async(std::launch::async, [&] { return round.join(elastic("a", 0), deadline); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  proto::JoinRequest bad = elastic("b");
  bad.set_min_nodes(3);
  try {
    round.join(bad, deadline);
    ADD_FAILURE() << "expected the joiner to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--nnodes=3:4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--nnodes=2:4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(round.join(elastic("c"), deadline).nnodes(), 2);
  EXPECT_EQ(host.get().node_rank(), 0);
}

// A re-formed round keeps the members' order, puts newcomers after them, and
// closes as soon as every previous member is back.
TEST(Round, ReformedRoundKeepsTheMembersOrderAndClosesWhenTheyAreBack) {
  RoundConfig c = elastic_config();
  c.round = 3;
  c.previous = {{"id-a", 0}, {"id-z", 1}};
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  auto newcomer =
      std::async(std::launch::async, [&] { return round.join(elastic("b"), deadline); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto member = std::async(std::launch::async, [&] { return round.join(elastic("z"), deadline); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(round.closed()) << "node a is not back yet";
  proto::JoinResponse host = round.join(elastic("a", 0), deadline);
  EXPECT_EQ(host.round(), 3);
  EXPECT_EQ(host.nnodes(), 3);
  EXPECT_EQ(member.get().node_rank(), 1) << "z was 1 and stays before the newcomer";
  EXPECT_EQ(newcomer.get().node_rank(), 2);
}

TEST(Round, ReformedRoundGoesOnWithoutAMemberThatDoesNotComeBack) {
  RoundConfig c = elastic_config();
  c.round = 1;
  c.previous = {{"id-a", 0}, {"id-b", 1}, {"id-c", 2}};
  c.rejoin_wait = std::chrono::milliseconds(200);
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  auto b = std::async(std::launch::async, [&] { return round.join(elastic("b"), deadline); });
  EXPECT_EQ(round.join(elastic("a", 0), deadline).nnodes(), 2);
  EXPECT_EQ(b.get().world_size(), 8);
}

TEST(Round, ReformedRoundBelowTheMinimumFailsNamingWhoCameBack) {
  RoundConfig c = elastic_config();
  c.round = 1;
  c.previous = {{"id-a", 0}, {"id-b", 1}};
  c.rejoin_wait = std::chrono::milliseconds(200);
  Round round(c);
  try {
    round.join(elastic("a", 0), Clock::now() + std::chrono::seconds(10));
    FAIL() << "expected the round to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 1 node(s) came back"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--nnodes=2:4"), std::string::npos) << e.what();
  }
}

TEST(Round, ANewcomerThatDisagreesIsTurnedAwayAlone) {
  RoundConfig c = elastic_config();
  c.round = 1;
  c.previous = {{"id-a", 0}, {"id-b", 1}};
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  EXPECT_THROW(round.join(request("c", -1, 4, 8), deadline), Error);
  auto b = std::async(std::launch::async, [&] { return round.join(elastic("b"), deadline); });
  EXPECT_EQ(round.join(elastic("a", 0), deadline).nnodes(), 2);
  EXPECT_EQ(b.get().node_rank(), 1);
}

TEST(Round, RestartsAreTheMostAnyMemberCounted) {
  Round round(config());
  auto deadline = Clock::now() + std::chrono::seconds(10);
  proto::JoinRequest b = request("b", -1);
  b.set_restarts(2);
  auto second = std::async(std::launch::async, [&] { return round.join(b, deadline); });
  EXPECT_EQ(round.join(request("a", 0), deadline).restarts(), 2);
  EXPECT_EQ(second.get().restarts(), 2);
}

// With a hosting agent, its count is the job's: a Join that claims more
// (up to 2^20 passes the door) does not spend the budget.
TEST(Round, TheHostsRestartsAreTheJobsWhateverAJoinClaims) {
  RoundConfig c = config();
  c.host_node_id = "id-a";
  Round round(c);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  proto::JoinRequest b = request("b", -1);
  b.set_restarts(1 << 20);
  auto second = std::async(std::launch::async, [&] { return round.join(b, deadline); });
  proto::JoinRequest a = request("a", 0);
  a.set_restarts(1);
  EXPECT_EQ(round.join(a, deadline).restarts(), 1);
  EXPECT_EQ(second.get().restarts(), 1);
}

}  // namespace
}  // namespace rtd::launcher
