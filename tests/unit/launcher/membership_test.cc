#include "launcher/membership.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>

namespace rtd::launcher {
namespace {

using Clock = std::chrono::system_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// What one Join call got back.
struct Answer {
  bool done = false;
  proto::JoinResponse layout;
  std::string error;
};

class MembershipTest : public ::testing::Test {
 protected:
  void make(int min_nodes, int max_nodes) {
    membership_ = std::make_unique<Membership>(RoundConfig{.min_nodes = min_nodes,
                                                           .max_nodes = max_nodes,
                                                           .nproc_per_node = 2,
                                                           .fingerprint = "f",
                                                           .master_port = 1,
                                                           .run_id = "run",
                                                           .last_call = milliseconds(0)},
                                               seconds(5));
    min_ = min_nodes;
    max_ = max_nodes;
  }
  std::shared_ptr<Answer> join(const std::string& host, int last_round = -1, int rank = -1) {
    proto::JoinRequest r;
    r.set_host(host);
    r.set_node_id("id-" + host);
    r.set_nnodes(max_);
    r.set_min_nodes(min_);
    r.set_nproc_per_node(2);
    r.set_fingerprint("f");
    r.set_node_rank(rank);
    r.set_last_round(last_round);
    r.set_agent_secret(secrets_[host]);  // as an agent does: the one it was issued, if any
    auto answer = std::make_shared<Answer>();
    membership_->join_async(
        r, Clock::now() + seconds(60),
        [this, host, answer](const proto::JoinResponse* layout, const Error* error) {
          answer->done = true;
          if (layout) answer->layout = *layout;
          if (layout) secrets_[host] = layout->agent_secret();
          if (error) answer->error = error->what();
        });
    return answer;
  }
  Beat beat(const Answer& a, SystemTime now, NodeState state = NodeState::kRunning) {
    return membership_->heartbeat(a.layout.round(), a.layout.node_rank(), a.layout.agent_secret(),
                                  state, now);
  }
  // The first round of n nodes ("a" hosts), closed by the last call.
  std::vector<std::shared_ptr<Answer>> start(int n) {
    std::vector<std::shared_ptr<Answer>> nodes{join("a", -1, 0)};
    for (int i = 1; i < n; ++i) nodes.push_back(join(std::string(1, static_cast<char>('a' + i))));
    membership_->tick(Clock::now() + milliseconds(10));
    for (auto& n : nodes) EXPECT_TRUE(n->done && n->error.empty()) << n->error;
    return nodes;
  }

  // A new host takes over (the etcd backend): the running round as recorded,
  // with these hosts lost, and "b" hosting now.
  void take_over(const std::vector<std::string>& lost) {
    ResumeFrom resume{membership_->record(), {}};
    for (const std::string& host : lost) resume.lost["id-" + host] = "was lost: its lease ended";
    membership_ = std::make_unique<Membership>(RoundConfig{.min_nodes = min_,
                                                           .max_nodes = max_,
                                                           .nproc_per_node = 2,
                                                           .fingerprint = "f",
                                                           .master_port = 2,
                                                           .run_id = "run",
                                                           .last_call = milliseconds(0),
                                                           .host_node_id = "id-b"},
                                               seconds(5), Clock::now(), &resume);
  }

  std::unique_ptr<Membership> membership_;
  std::map<std::string, std::string> secrets_;  // by host, as each agent keeps its own
  int min_ = 1, max_ = 1;
};

TEST_F(MembershipTest, AFixedJobFailsWhenANodeFallsSilent) {
  make(2, 2);
  auto nodes = start(2);
  const auto t0 = Clock::now();
  EXPECT_TRUE(beat(*nodes[0], t0).failure.empty());
  EXPECT_TRUE(beat(*nodes[1], t0).failure.empty());
  EXPECT_TRUE(beat(*nodes[0], t0 + seconds(4)).failure.empty());
  membership_->tick(t0 + seconds(4));
  membership_->tick(t0 + seconds(6));
  Beat b = beat(*nodes[0], t0 + seconds(6));
  EXPECT_NE(b.failure.find("node 1 (b) has not been heard from for 6 s (--heartbeat-timeout"),
            std::string::npos)
      << b.failure;
}

// A member whose held call closed (its dtrun killed) is lost a second later,
// not after the heartbeat timeout, and the members are told which.
TEST_F(MembershipTest, AClosedCallLosesTheMemberWithinASecond) {
  make(2, 3);
  auto nodes = start(3);
  const auto t0 = Clock::now();
  for (auto& n : nodes) beat(*n, t0);
  membership_->call_closed(0, 2, t0, t0 + milliseconds(50));
  membership_->tick(t0 + milliseconds(500));
  EXPECT_FALSE(beat(*nodes[0], t0 + milliseconds(500)).rejoin) << "within the grace";
  membership_->tick(t0 + milliseconds(1100));
  Beat b = beat(*nodes[1], t0 + milliseconds(1100));
  EXPECT_TRUE(b.failure.empty()) << b.failure;
  EXPECT_TRUE(b.rejoin);
  EXPECT_NE(b.change.find("node 2 (c) was lost"), std::string::npos) << b.change;
}

// A call closed because the agent changed what it beats for is followed by
// a new one at once: nothing is lost, whichever the host sees first.
TEST_F(MembershipTest, ANewerCallKeepsAMemberWhoseCallClosed) {
  make(2, 2);
  auto nodes = start(2);
  const auto t0 = Clock::now();
  beat(*nodes[1], t0);
  beat(*nodes[1], t0 + milliseconds(10));  // the new call came first
  membership_->call_closed(0, 1, t0, t0 + milliseconds(20));
  beat(*nodes[1], t0 + milliseconds(30));
  membership_->call_closed(0, 1, t0 + milliseconds(30), t0 + milliseconds(40));
  beat(*nodes[1], t0 + milliseconds(50));  // ... or after
  membership_->tick(t0 + seconds(2));
  EXPECT_TRUE(beat(*nodes[0], t0 + seconds(2)).failure.empty());
}

// In a fixed-size job the loss ends the job, naming the node.
TEST_F(MembershipTest, AClosedCallInAFixedJobFailsItNamingTheNode) {
  make(2, 2);
  auto nodes = start(2);
  const auto t0 = Clock::now();
  beat(*nodes[1], t0);
  membership_->call_closed(0, 1, t0, t0);
  membership_->tick(t0 + milliseconds(1200));
  Beat b = beat(*nodes[0], t0 + milliseconds(1200));
  EXPECT_NE(b.failure.find("node 1 (b) was lost"), std::string::npos) << b.failure;
}

TEST_F(MembershipTest, ANodeThatJoinsARunningElasticJobMakesEveryMemberRejoin) {
  make(2, 3);
  auto nodes = start(2);
  EXPECT_EQ(nodes[0]->layout.nnodes(), 2);
  EXPECT_FALSE(beat(*nodes[1], Clock::now()).rejoin);
  auto newcomer = join("c");
  EXPECT_FALSE(newcomer->done);
  EXPECT_TRUE(beat(*nodes[0], Clock::now()).rejoin);
  EXPECT_TRUE(beat(*nodes[1], Clock::now()).rejoin);
  auto b = join("b", 0);
  EXPECT_FALSE(b->done) << "the round waits for every member";
  auto a = join("a", 0, 0);
  ASSERT_TRUE(a->done && b->done && newcomer->done) << a->error << b->error << newcomer->error;
  EXPECT_EQ(a->layout.round(), 1);
  EXPECT_EQ(a->layout.nnodes(), 3);
  EXPECT_EQ(b->layout.node_rank(), 1);
  EXPECT_EQ(newcomer->layout.node_rank(), 2);
  EXPECT_EQ(newcomer->layout.world_size(), 6);
  EXPECT_FALSE(beat(*a, Clock::now()).rejoin);
}

TEST_F(MembershipTest, ALostNodeLeavesARoundOfTheRestWhenEnoughRemain) {
  make(2, 3);
  auto nodes = start(3);
  const auto t0 = Clock::now();
  beat(*nodes[0], t0 + seconds(4));
  beat(*nodes[1], t0 + seconds(4));
  membership_->tick(t0 + seconds(6));  // c silent for 6 s
  Beat b = beat(*nodes[1], t0 + seconds(6));
  EXPECT_TRUE(b.failure.empty()) << b.failure;
  EXPECT_TRUE(b.rejoin);
  auto a = join("a", 0, 0);
  auto bb = join("b", 0);
  ASSERT_TRUE(a->done && bb->done) << a->error << bb->error;
  EXPECT_EQ(a->layout.nnodes(), 2);
  EXPECT_EQ(bb->layout.round(), 1);
  // The lost node's agent, alive after all, is told to rejoin as a newcomer.
  EXPECT_TRUE(beat(*nodes[2], t0 + seconds(7)).rejoin);
}

TEST_F(MembershipTest, ALostNodeBelowTheMinimumFailsTheJob) {
  make(2, 3);
  auto nodes = start(2);
  const auto t0 = Clock::now();
  beat(*nodes[0], t0 + seconds(4));
  membership_->tick(t0 + seconds(6));
  Beat b = beat(*nodes[0], t0 + seconds(6));
  EXPECT_NE(b.failure.find("1 node(s) remain, fewer than the 2 that --nnodes=2:3 needs"),
            std::string::npos)
      << b.failure;
}

TEST_F(MembershipTest, AFullJobTurnsANewcomerAway) {
  make(1, 2);
  auto nodes = start(2);
  auto extra = join("c");
  ASSERT_TRUE(extra->done);
  EXPECT_NE(extra->error.find("the most --nnodes=1:2 allows"), std::string::npos) << extra->error;
  EXPECT_FALSE(beat(*nodes[0], Clock::now()).rejoin) << "the members go on";
}

TEST_F(MembershipTest, AFinishingJobTurnsANewcomerAway) {
  make(1, 3);
  auto nodes = start(2);
  beat(*nodes[1], Clock::now(), NodeState::kDone);
  auto late = join("c");
  ASSERT_TRUE(late->done);
  EXPECT_NE(late->error.find("the job is finishing"), std::string::npos) << late->error;
}

TEST_F(MembershipTest, ARestartRoundOfAFixedJobWaitsForEveryNode) {
  make(2, 2);
  auto nodes = start(2);
  auto a = join("a", 0, 0);  // its workers failed: it rejoins first
  EXPECT_FALSE(a->done);
  EXPECT_TRUE(beat(*nodes[1], Clock::now()).rejoin);
  auto b = join("b", 0);
  ASSERT_TRUE(a->done && b->done);
  EXPECT_EQ(b->layout.round(), 1);
  EXPECT_EQ(b->layout.node_rank(), 1);
}

// The etcd backend: a new host takes over the running round from its
// record; the next round forms at once without the lost host, the
// survivors keep their secrets and their order, the new host is node 0.
TEST_F(MembershipTest, ANewHostTakesOverTheRunningRound) {
  make(2, 3);
  auto first = start(3);
  const proto::RoundRecord record = membership_->record();
  ASSERT_EQ(record.round(), 0);
  ASSERT_EQ(record.members_size(), 3);
  EXPECT_EQ(record.members(2).node_id(), "id-c");
  take_over({"a"});
  Beat told = membership_->peek(0, 2);
  EXPECT_TRUE(told.rejoin);
  EXPECT_NE(told.change.find("node 0 (a) was lost: its lease ended"), std::string::npos)
      << told.change;
  EXPECT_TRUE(told.failure.empty()) << told.failure;
  auto b = join("b", 0, 0);
  auto c = join("c", 0);
  ASSERT_TRUE(b->done && c->done) << "every member not lost is back";
  ASSERT_TRUE(b->error.empty() && c->error.empty()) << b->error << c->error;
  EXPECT_EQ(b->layout.round(), 1);
  EXPECT_EQ(b->layout.node_rank(), 0);
  EXPECT_EQ(c->layout.node_rank(), 1);
  EXPECT_EQ(c->layout.nnodes(), 2);
  EXPECT_EQ(c->layout.agent_secret(), first[2]->layout.agent_secret());
  EXPECT_EQ(membership_->record().round(), 1);
}

// A member that claims a survivor's id without its secret is still refused
// under the new host.
TEST_F(MembershipTest, ANewHostKnowsTheMembersSecrets) {
  make(2, 3);
  start(3);
  take_over({"a"});
  secrets_["c"] = "stolen";
  auto c = join("c", 0);
  ASSERT_TRUE(c->done);
  EXPECT_NE(c->error.find("names an agent id it was not issued"), std::string::npos) << c->error;
}

// Too few left after the host's loss: the job fails, saying why.
TEST_F(MembershipTest, ANewHostBelowTheMinimumFailsTheJob) {
  make(2, 2);
  start(2);
  take_over({"a"});
  Beat told = membership_->peek(0, 1);
  EXPECT_NE(told.failure.find("node 0 (a) was lost: its lease ended"), std::string::npos)
      << told.failure;
  auto b = join("b", 0, 0);
  ASSERT_TRUE(b->done);
  EXPECT_FALSE(b->error.empty());
}

}  // namespace
}  // namespace rtd::launcher
