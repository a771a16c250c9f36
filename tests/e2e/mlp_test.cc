// The first trainer: N workers with batch B follow the loss curve of one worker
// with batch N*B (to float tolerance), and the loss falls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <regex>

#include "tests/testing/run_command.h"

namespace rtd {
namespace {

std::map<int, double> loss_curve(int workers, int batch, const std::string& extra = "") {
  auto r = testing_util::run_command(
      std::string(DTRUN_PATH) + " --nproc-per-node=" + std::to_string(workers) + " " + MLP_PATH +
          " --steps 60 --log-every 5 --batch " + std::to_string(batch) + extra,
      120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::map<int, double> curve;
  std::regex line(R"(\[rank 0\]: step (\d+) loss (\S+))");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it) {
    curve[std::stoi((*it)[1])] = std::stod((*it)[2]);
  }
  return curve;
}

// A rank that never creates its communicator (it hangs before init): the
// others warn while they wait, and then say which rank never joined which
// communicator and for how long they waited.
TEST(MlpCpu, ARankThatNeverJoinsIsNamed) {
  auto r = testing_util::run_command(
      std::string(DTRUN_PATH) +
          " --nproc-per-node=2 --env RTD_TIMEOUT_S=3 --env RTD_HANG_WARN_S=1 --grace-period=1 "
          "sh -c \"if [ \\$RANK = 1 ]; then sleep 60; fi; exec " +
          MLP_PATH + " --steps 1\"",
      60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing_util::contains(r.output,
                                     "rank 0: still waiting for rank 1 to join communicator "
                                     "'default'"))
      << r.output;
  EXPECT_TRUE(testing_util::contains(
      r.output, "rank 0: rank 1 never joined communicator 'default' (waited 3 s"))
      << r.output;
}

TEST(MlpCpu, NWorkersMatchOneWorkerWithNTimesTheBatchAndLossFalls) {
  auto one = loss_curve(1, 24);
  ASSERT_EQ(one.size(), 13u) << "steps 1, 5, 10, ..., 60";
  for (int workers : {2, 3}) {
    auto many = loss_curve(workers, 24 / workers);
    ASSERT_EQ(many.size(), one.size()) << workers << " workers";
    for (const auto& [step, loss] : one) {
      EXPECT_NEAR(many[step], loss, 1e-4 * std::fabs(loss)) << workers << " workers, step " << step;
    }
  }
  EXPECT_LT(one.rbegin()->second, 0.5 * one.begin()->second) << "the loss must fall";
}

// The same with the weights and AdamW's state sharded: every strategy on 2
// workers follows one worker with twice the batch, and the loss falls.
TEST(MlpCpu, ShardedWorkersMatchOneWorkerWithNTimesTheBatch) {
  auto one = loss_curve(1, 24, " --shard zero3 --lr 0.01");
  ASSERT_EQ(one.size(), 13u);
  for (const char* shard : {"zero1", "zero2", "zero3", "hybrid"}) {
    auto two = loss_curve(2, 12, std::string(" --shard ") + shard + " --lr 0.01");
    ASSERT_EQ(two.size(), one.size()) << shard;
    for (const auto& [step, loss] : one)
      EXPECT_NEAR(two[step], loss, 1e-4 * std::fabs(loss)) << shard << ", step " << step;
  }
  EXPECT_LT(one.rbegin()->second, 0.5 * one.begin()->second) << "the loss must fall";
}

}  // namespace
// RTD_TRACE_DIR: each rank writes its timeline, dtrun merges them into one
// trace.json that a JSON reader opens, with both ranks' collectives, DDP's
// buckets and the trainer's own scopes; RTD_TRACE_EVENTS bounds each rank's.
TEST(MlpCpu, TraceDirHoldsOneMergedTimelineOfEveryRank) {
  const std::string dir = ::testing::TempDir() + "rtd_trace_" + std::to_string(getpid());
  auto r = testing_util::run_command("rm -rf " + dir + " && RTD_TRACE_DIR=" + dir + " " +
                                     DTRUN_PATH + " --nproc-per-node=2 " + MLP_PATH + " --steps 6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A JSON reader opens it (python3 -m json.tool), then what it holds.
  auto check = testing_util::run_command("python3 -m json.tool " + dir + "/trace.json");
  ASSERT_EQ(check.exit_code, 0) << check.output;
  for (const char* text :
       {"\"pid\": 0", "\"pid\": 1", "\"name\": \"all_reduce\"", "\"name\": \"ddp bucket\"",
        "\"name\": \"forward\"", "\"name\": \"step\"", "\"detail\": \"float32 x "})
    EXPECT_NE(check.output.find(text), std::string::npos) << text;

  r = testing_util::run_command(
      "rm -rf " + dir + " && RTD_TRACE_DIR=" + dir + " RTD_TRACE_EVENTS=10 " + DTRUN_PATH +
      " --nproc-per-node=2 " + MLP_PATH + " --steps 6 && grep -c ph.:.X " + dir +
      "/rank_0.json && grep -o dropped_events.:[0-9]* " + dir + "/rank_0.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\n10\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("dropped_events\":0"), std::string::npos) << r.output;

  // A smaller job after it in the same directory: its trace is its own ranks'.
  r = testing_util::run_command(
      "rm -rf " + dir + " && RTD_TRACE_DIR=" + dir + " " + DTRUN_PATH + " --nproc-per-node=3 " +
      MLP_PATH + " --steps 2 && RTD_TRACE_DIR=" + dir + " " + DTRUN_PATH + " --nproc-per-node=2 " +
      MLP_PATH + " --steps 2 && python3 -m json.tool " + dir + "/trace.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trace of 2 rank(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 file(s) of other jobs or rounds left out"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\"pid\": 1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\"pid\": 2"), std::string::npos) << "the earlier job's rank 2";

  // A trace directory that cannot be one fails the job before it starts.
  r = testing_util::run_command("rm -rf " + dir + " && touch " + dir + " && RTD_TRACE_DIR=" + dir +
                                " " + DTRUN_PATH + " --nproc-per-node=2 " + MLP_PATH +
                                " --steps 6");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("RTD_TRACE_DIR=" + dir + ": a file, not a directory"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("joined:"), std::string::npos) << "the job started:\n" << r.output;
  testing_util::run_command("rm -rf " + dir);
}

}  // namespace rtd
