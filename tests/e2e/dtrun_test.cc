// dtrun as a user runs it: the worker environment, output prefixes, exit codes,
// signals, restarts, and every bad-input case, each with a clear message.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "tests/testing/run_command.h"

namespace rtd {
namespace {

using testing_util::contains;
using testing_util::run_command;

const std::string kDtrun = DTRUN_PATH;

std::string dtrun(const std::string& args) { return kDtrun + " " + args; }

// A listening socket on a free loopback port, held for the test's lifetime.
struct HeldPort {
  int fd = -1;
  int port = 0;
  HeldPort() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd, 1);
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~HeldPort() { close(fd); }
};

int unused_port() {
  HeldPort p;
  return p.port;  // closed again on return: nobody listens there
}

TEST(Dtrun, WorkersGetTheTorchrunEnvironmentAndPrefixedOutput) {
  auto r =
      run_command(dtrun("--nproc-per-node=3 sh -c \"echo R=\\$RANK W=\\$WORLD_SIZE "
                        "L=\\$LOCAL_RANK LW=\\$LOCAL_WORLD_SIZE G=\\$GROUP_RANK "
                        "S=\\${DTRUN_STORE:+set} T=\\${DTRUN_TOKEN:+set} "
                        "MP=\\${MASTER_PORT:+set} OMP=\\$OMP_NUM_THREADS X=\\$X\" "));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    std::string expected = "[rank " + std::to_string(rank) + "]: R=" + std::to_string(rank) +
                           " W=3 L=" + std::to_string(rank) +
                           " LW=3 G=0 S=set T=set MP=set OMP=1 X=";
    EXPECT_TRUE(contains(r.output, expected)) << "missing: " << expected << "\n" << r.output;
  }
}

TEST(Dtrun, BackgroundChildOfAFinishedWorkerDoesNotKeepDtrunWaiting) {
  auto r = run_command(dtrun("--nproc-per-node=1 sh -c \"sleep 300 & echo done\""), 30);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0]: done")) << r.output;
}

TEST(Dtrun, SignalDuringRendezvousEndsDtrunAtOnce) {
  int port = unused_port();
  auto r = run_command(dtrun("--nnodes=2 --node-rank=0 --rdzv=127.0.0.1:" + std::to_string(port) +
                             " --rdzv-timeout=120 --token=t true") +
                           " & pid=$!; sleep 1; kill -TERM $pid; wait $pid; echo dtrun_rc=$?",
                       30);
  // (SIGTERM: a background job of a script ignores SIGINT.)
  EXPECT_TRUE(contains(r.output, "dtrun_rc=143")) << r.output;
}

TEST(Dtrun, EnvFlagReachesEveryWorker) {
  auto r =
      run_command(dtrun("--nproc-per-node=2 --env X=hello --env NCCL_DEBUG=INFO "
                        "sh -c \"echo X=\\$X N=\\$NCCL_DEBUG\""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 1]: X=hello N=INFO")) << r.output;
}

TEST(Dtrun, FailingWorkerStopsTheOthersAndItsExitCodeIsDtruns) {
  auto r = run_command(dtrun("--nproc-per-node=3 sh -c \"if [ \\$RANK = 1 ]; then exit 7; fi; "
                             "sleep 60\""),
                       30);
  EXPECT_EQ(r.exit_code, 7) << r.output;
  EXPECT_TRUE(contains(r.output, "worker rank 1 exited with code 7")) << r.output;
}

// Waits (up to 20 s) until both workers printed "ready" into /tmp/sig.$$, so
// that the signal reaches dtrun after it started forwarding.
const std::string kWaitForTwoReady =
    "for i in $(seq 100); do [ $(grep -c ready /tmp/sig.$$) -ge 2 ] && break; sleep 0.2; done; ";

TEST(Dtrun, SigtermIsForwardedToTheWorkers) {
  auto r = run_command(
      dtrun("--nproc-per-node=2 sh -c \"trap \\\"echo got TERM; exit 0\\\" TERM; echo ready; "
            "while true; do sleep 0.1; done\"") +
          " > /tmp/sig.$$ 2>&1 & pid=$!; " + kWaitForTwoReady +
          "kill -TERM $pid; wait $pid; echo dtrun_rc=$?; cat /tmp/sig.$$; rm -f /tmp/sig.$$",
      30);
  EXPECT_TRUE(contains(r.output, "[rank 0]: got TERM")) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 1]: got TERM")) << r.output;
  EXPECT_TRUE(contains(r.output, "dtrun_rc=143")) << r.output;
}

TEST(Dtrun, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  auto r = run_command(dtrun("--nproc-per-node=2 --grace-period=1 sh -c \"trap \\\"\\\" TERM; "
                             "echo ready; while true; do sleep 0.1; done\"") +
                           " > /tmp/sig.$$ 2>&1 & pid=$!; " + kWaitForTwoReady +
                           "kill -TERM $pid; wait $pid; echo dtrun_rc=$?; cat /tmp/sig.$$; "
                           "rm -f /tmp/sig.$$",
                       30);
  EXPECT_TRUE(contains(r.output, "sending SIGKILL")) << r.output;
  EXPECT_TRUE(contains(r.output, "dtrun_rc=143")) << r.output;
}

// A second Ctrl-C (or SIGTERM) during the grace period kills the workers at
// once: with --grace-period=60 and workers ignoring SIGTERM, only that ends
// dtrun within the command's limit.
TEST(Dtrun, ASecondSignalEndsTheGracePeriodAtOnce) {
  auto r = run_command(
      dtrun("--nproc-per-node=2 --grace-period=60 sh -c \"trap \\\"\\\" TERM INT; echo ready; "
            "while true; do sleep 0.1; done\"") +
          " > /tmp/sig.$$ 2>&1 & pid=$!; " + kWaitForTwoReady +
          "kill -INT $pid; sleep 1; kill -INT $pid; wait $pid; echo dtrun_rc=$?; "
          "cat /tmp/sig.$$; rm -f /tmp/sig.$$",
      30);
  EXPECT_TRUE(contains(r.output, "dtrun_rc=130")) << r.output;
  EXPECT_TRUE(contains(r.output, "killing the workers now")) << r.output;
}

// When rank 1 is killed and rank 0 aborts a moment later (as a peer's
// collective does), rank 1 is the cause and rank 0 its consequence.
TEST(Dtrun, TheFirstFailureIsBlamedAndTheOthersListedAfterIt) {
  const std::string script =
      "f=/tmp/p1.\\$DTRUN_STORE; if [ \\$RANK = 1 ]; then echo \\$\\$ > \\$f.tmp; "
      "mv \\$f.tmp \\$f; sleep 0.3; kill -9 \\$\\$; fi; while [ ! -s \\$f ]; do :; done; "
      "p=\\$(cat \\$f); while [ -e /proc/\\$p ]; do :; done; rm -f \\$f; "
      "[ \\$RANK = 2 ] && sleep 30; kill -ABRT \\$\\$";
  for (int run = 0; run < 3; ++run) {
    auto r = run_command(dtrun("--nproc-per-node=3 sh -c \"" + script + "\""), 40);
    EXPECT_EQ(r.exit_code, 137) << r.output;
    EXPECT_TRUE(contains(r.output,
                         "job failed: worker rank 1 was killed by signal 9 (Killed); then rank 0 "
                         "was killed by signal 6 (Aborted)"))
        << r.output;
    EXPECT_FALSE(contains(r.output, "then rank 2")) << "rank 2 was stopped, not failed\n"
                                                    << r.output;
  }
}

// Stopping a worker stops its whole process group: a wrapper script's
// children do not outlive it.
TEST(Dtrun, StoppedWorkersTakeTheirChildrenWithThem) {
  // Rank 0 is a wrapper whose child (a sleep) writes its pid to a file.
  const std::string pids = ::testing::TempDir() + "dtrun_grandchild_" + std::to_string(getpid());
  auto r = run_command(
      dtrun(R"(--nproc-per-node=2 sh -c "if [ \$RANK = 1 ]; then sleep 0.5; exit 3; fi; )"
            R"(sh -c \"echo \\\$\\\$ > )" +
            pids + R"(; exec sleep 300\"")") +
          // Gone, or a zombie (dead; this container's init may not reap it).
          "; echo dtrun_rc=$?; sleep 0.2; s=$(cut -d\" \" -f3 /proc/$(cat " + pids +
          ")/stat 2>/dev/null); if [ -z \"$s\" ] || [ \"$s\" = Z ]; then echo none-left; fi",
      30);
  std::remove(pids.c_str());
  EXPECT_TRUE(contains(r.output, "dtrun_rc=3")) << r.output;
  EXPECT_TRUE(contains(r.output, "none-left")) << r.output;
}

TEST(Dtrun, MaxRestartsRestartsTheWorkersAfterAFailure) {
  auto r =
      run_command(dtrun("--nproc-per-node=2 --max-restarts=2 sh -c \"echo attempt "
                        "\\$TORCHELASTIC_RESTART_COUNT round \\$DTRUN_ROUND; "
                        "[ \\$TORCHELASTIC_RESTART_COUNT -ge 1 ]\""));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0]: attempt 0 round 0")) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0]: attempt 1 round 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "(1 of 2 restarts)")) << r.output;
  EXPECT_FALSE(contains(r.output, "attempt 2")) << r.output;
}

TEST(Dtrun, RestartsAreBoundedByMaxRestarts) {
  auto r = run_command(dtrun("--nproc-per-node=1 --max-restarts=1 sh -c \"exit 4\""));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_TRUE(contains(r.output, "(1 of 1 restarts)")) << r.output;
}

// Restarts back off (doubling from --restart-backoff's FIRST), and a spent
// budget lists every failure in order.
TEST(Dtrun, RestartsBackOffAndASpentBudgetListsEveryFailure) {
  auto r = run_command(dtrun("--nproc-per-node=1 --max-restarts=2 --restart-backoff=1:8 sh -c "
                             "\"exit \\$((5 + TORCHELASTIC_RESTART_COUNT))\"") +
                           " 2>&1; echo rc=$?",
                       60);
  EXPECT_TRUE(contains(r.output, "rc=7")) << r.output;
  // The first waits 1 s and the second 2 s, each within the ±25% jitter.
  EXPECT_TRUE(contains(r.output, "restarting all workers in 0.") ||
              contains(r.output, "restarting all workers in 1."))
      << r.output;
  EXPECT_TRUE(contains(r.output, "restarting all workers in 1.") ||
              contains(r.output, "restarting all workers in 2."))
      << r.output;
  EXPECT_TRUE(contains(r.output, "the restart budget is spent (2 of 2 restarts)")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "1) worker rank 0 exited with code 5; 2) worker rank 0 exited "
                       "with code 6; 3) worker rank 0 exited with code 7"))
      << r.output;
}

TEST(Dtrun, LogDirHoldsEachRanksOutput) {
  std::string dir = ::testing::TempDir() + "dtrun_logs_" + std::to_string(getpid());
  auto r = run_command(dtrun("--nproc-per-node=2 --log-dir=" + dir +
                             " sh -c \"echo out-\\$RANK; echo err-\\$RANK >&2\"") +
                       " && cat " + dir + "/attempt_0/rank_1.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "\nout-1\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "err-1\n")) << r.output;
}

// A stderr line written while a stdout line is half done must not land in
// the middle of it, in the file as on the terminal.
TEST(Dtrun, LogDirFilesHoldWholeLines) {
  std::string dir = ::testing::TempDir() + "dtrun_lines_" + std::to_string(getpid());
  auto r = run_command(dtrun("--nproc-per-node=1 --log-dir=" + dir +
                             " sh -c \"printf half-; sleep 0.3; echo err-line >&2; sleep 0.3; "
                             "echo done\"") +
                       " && cat " + dir + "/attempt_0/rank_0.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0]: half-done\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "\nhalf-done\n")) << "the file\n" << r.output;
  EXPECT_TRUE(contains(r.output, "\nerr-line\n")) << r.output;
}

// torchrun's console flags: --local-ranks-filter shows only those ranks, and
// --redirects keeps a stream in the --log-dir files only.
TEST(Dtrun, LocalRanksFilterAndRedirects) {
  std::string dir = ::testing::TempDir() + "dtrun_redirects_" + std::to_string(getpid());
  auto r = run_command(dtrun("--nproc-per-node=2 --local-ranks-filter=1 --log-dir=" + dir +
                             " --redirects=2 sh -c \"echo out-\\$RANK; echo err-\\$RANK >&2\"") +
                       " && cat " + dir + "/attempt_0/rank_0.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 1]: out-1")) << r.output;
  EXPECT_FALSE(contains(r.output, "[rank 0]: out-0")) << r.output;
  EXPECT_FALSE(contains(r.output, "[rank 1]: err-1")) << "stderr redirected\n" << r.output;
  EXPECT_TRUE(contains(r.output, "\nerr-0\n")) << "the file has it all\n" << r.output;
}

TEST(Dtrun, MissingProgramIsAClearError) {
  auto r = run_command(dtrun("--nproc-per-node=2 ./no-such-trainer"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "cannot run './no-such-trainer': no such file")) << r.output;
  auto p = run_command(dtrun("no-such-trainer-on-path"));
  EXPECT_TRUE(contains(p.output, "not found on PATH")) << p.output;
}

TEST(Dtrun, MalformedFlagsExitTwoNamingTheFlag) {
  auto r = run_command(dtrun("--nproc-per-node=many true"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--nproc-per-node")) << r.output;
  auto h = run_command(dtrun("--help"));
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_TRUE(contains(h.output, "Examples:")) << h.output;
}

TEST(Dtrun, UnreachableRendezvousFailsAfterTheTimeoutNotAHang) {
  int port = unused_port();
  auto r = run_command(dtrun("--nnodes=2 --node-rank=1 --rdzv=127.0.0.1:" + std::to_string(port) +
                             " --rdzv-timeout=2 --token=t true"),
                       30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "could not reach the rendezvous at 127.0.0.1:" +
                                     std::to_string(port) + " within 2 s"))
      << r.output;
}

TEST(Dtrun, RendezvousPortInUseIsAClearError) {
  HeldPort held;
  auto r =
      run_command(dtrun("--nnodes=2 --node-rank=0 --rdzv=127.0.0.1:" + std::to_string(held.port) +
                        " --rdzv-timeout=2 --token=t true"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "already in use")) << r.output;
}

// Without --node-rank, a port held by something that is not a dtrun is
// named as such, not "could not reach".
TEST(Dtrun, RendezvousPortHeldByAnotherProgramIsNamed) {
  HeldPort held;
  auto r = run_command(
      dtrun("--nnodes=2 --rdzv=127.0.0.1:" + std::to_string(held.port) + " --rdzv-timeout=2 true"),
      30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "does not answer as a dtrun rendezvous")) << r.output;
}

// ... and it is said at once, not when --rdzv-timeout (here 60 s) runs out.
TEST(Dtrun, APortHeldByAnotherProgramIsSaidAtOnce) {
  HeldPort held;
  auto r = run_command(dtrun("--nnodes=2 --rdzv=127.0.0.1:" + std::to_string(held.port) +
                             " --rdzv-timeout=60 true") +
                           " 2>&1 & p=$!; sleep 5; kill $p; wait $p",
                       30);
  EXPECT_TRUE(contains(r.output, "does not answer as a dtrun rendezvous")) << r.output;
  EXPECT_TRUE(contains(r.output, "retrying until --rdzv-timeout")) << r.output;
}

// The usage line as typed on each node: no --node-rank, no token. Two agents
// on one host: the first to bind hosts, the other joins; the job runs, and
// both say that the control plane is unauthenticated.
TEST(Dtrun, TheUsageLineAsTypedRunsOnTwoAgents) {
  const std::string line =
      dtrun("--nproc-per-node=2 --nnodes=2 --rdzv=127.0.0.1:" + std::to_string(unused_port()) +
            " sh -c \"echo rank \\$RANK of \\$WORLD_SIZE\"");
  auto r = run_command(line + " > /tmp/u0.$$ 2>&1 & p0=$!; " + line +
                           "; echo second_rc=$?; wait $p0; echo first_rc=$?; cat /tmp/u0.$$; "
                           "rm -f /tmp/u0.$$",
                       60);
  EXPECT_TRUE(contains(r.output, "second_rc=0")) << r.output;
  EXPECT_TRUE(contains(r.output, "first_rc=0")) << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + " of 4")) << r.output;
  std::size_t warnings = 0;
  for (std::size_t at = 0; (at = r.output.find("unauthenticated", at)) != std::string::npos; ++at)
    ++warnings;
  EXPECT_EQ(warnings, 2u) << "once per agent\n" << r.output;
}

TEST(Dtrun, AnEmptyTokenDoesNotSwallowTheNextFlag) {
  auto r = run_command(dtrun("--token= --nnodes=2 true"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--token= has an empty value")) << r.output;
}

// Two agents on this host, as two nodes; returns both outputs and exit codes.
std::string two_nodes(const std::string& node0, const std::string& node1, int port) {
  std::string rdzv = " --rdzv=127.0.0.1:" + std::to_string(port) + " ";
  return dtrun("--nnodes=2 --node-rank=0" + rdzv + node0) + " > /tmp/n0.$$ 2>&1 & p0=$!; " +
         dtrun("--nnodes=2 --node-rank=1" + rdzv + node1) +
         "; echo node1_rc=$?; wait $p0; echo node0_rc=$?; cat /tmp/n0.$$; rm -f /tmp/n0.$$";
}

// A node that disagrees is turned away at once, naming the difference; the
// host is not failed by another's join (it might be a stranger's): it waits,
// logs the refusal at once, and names it when its own wait ends.
TEST(Dtrun, ANodeThatDisagreesOnNprocPerNodeIsRefusedAndTheHostSaysWhy) {
  auto r =
      run_command(two_nodes("--nproc-per-node=2 --rdzv-timeout=3 --token=t true",
                            "--nproc-per-node=3 --rdzv-timeout=3 --token=t true", unused_port()),
                  40);
  EXPECT_TRUE(contains(r.output, "node1_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "node0_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "--nproc-per-node=3 but node rank 0 with --nproc-per-node=2"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "refused a join from")) << r.output;
  EXPECT_TRUE(contains(r.output, "refused: node at 127.0.0.1 was started with")) << r.output;
}

TEST(Dtrun, ANodeThatDisagreesOnNnodesIsRefusedAndTheHostSaysWhy) {
  int port = unused_port();
  std::string rdzv = " --rdzv=127.0.0.1:" + std::to_string(port) + " --token=t --rdzv-timeout=3 ";
  auto r = run_command(dtrun("--nnodes=2 --node-rank=0" + rdzv + "true") +
                           " > /tmp/m0.$$ 2>&1 & p0=$!; sleep 0.5; " +
                           dtrun("--nnodes=3 --node-rank=1" + rdzv + "true") +
                           "; echo node1_rc=$?; wait $p0; echo node0_rc=$?; cat /tmp/m0.$$",
                       40);
  EXPECT_TRUE(contains(r.output, "node1_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "node0_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "--nnodes=3 but node rank 0 with --nnodes=2")) << r.output;
}

// Two unrelated elastic jobs sent to one rendezvous port: the second runs
// another program, so it is another job and is refused, naming the
// difference; the first is not merged with it and runs alone.
TEST(Dtrun, AnotherProgramOnTheSameElasticRendezvousIsRefused) {
  int port = unused_port();
  std::string rdzv = " --rdzv=127.0.0.1:" + std::to_string(port) +
                     " --token=t --rdzv-timeout=6 --rdzv-last-call=1 --nnodes=1:2 ";
  auto r = run_command(
      dtrun(rdzv + "sh -c \"echo first world \\$WORLD_SIZE; sleep 3\"") +
          " > /tmp/e0.$$ 2>&1 & p0=$!; sleep 1.5; " +
          dtrun(rdzv + "sh -c \"echo second world \\$WORLD_SIZE\"") +
          "; echo second_rc=$?; wait $p0; echo first_rc=$?; cat /tmp/e0.$$; rm -f /tmp/e0.$$",
      60);
  EXPECT_TRUE(contains(r.output, "second_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "first_rc=0")) << r.output;
  EXPECT_TRUE(contains(r.output, "runs a different configuration")) << r.output;
  EXPECT_TRUE(contains(r.output, "program=sh, command ")) << r.output;
  EXPECT_FALSE(contains(r.output, "second world")) << r.output;
  EXPECT_FALSE(contains(r.output, "first world 2")) << "merged\n" << r.output;
}

TEST(Dtrun, NodeWithTheWrongTokenIsRejected) {
  auto r = run_command(
      two_nodes("--nproc-per-node=1 --rdzv-timeout=3 --token=right true",
                "--nproc-per-node=1 --rdzv-timeout=3 --token=wrong true", unused_port()),
      40);
  EXPECT_TRUE(contains(r.output, "node1_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "token does not match")) << r.output;
  EXPECT_TRUE(contains(r.output, "node0_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "only 1 of 2 nodes joined")) << r.output;
  // The host logs the refusal with the caller's address.
  EXPECT_TRUE(contains(r.output, "refused a join from ipv4:127.0.0.1:")) << r.output;
}

TEST(Dtrun, TwoNodesOnOneHostRunOneWorldAndAFailurePropagates) {
  std::string show = "sh -c \"echo rank \\$RANK of \\$WORLD_SIZE group \\$GROUP_RANK\"";
  auto ok = run_command(two_nodes("--nproc-per-node=2 --token=t " + show,
                                  "--nproc-per-node=2 --token=t " + show, unused_port()),
                        40);
  EXPECT_TRUE(contains(ok.output, "node1_rc=0")) << ok.output;
  EXPECT_TRUE(contains(ok.output, "node0_rc=0")) << ok.output;
  EXPECT_TRUE(contains(ok.output, "[rank 3]: rank 3 of 4 group 1")) << ok.output;
  EXPECT_TRUE(contains(ok.output, "[rank 0]: rank 0 of 4 group 0")) << ok.output;

  std::string fail = "sh -c \"if [ \\$RANK = 3 ]; then exit 5; fi; sleep 60\"";
  auto bad = run_command(two_nodes("--nproc-per-node=2 --token=t " + fail,
                                   "--nproc-per-node=2 --token=t " + fail, unused_port()),
                         40);
  EXPECT_TRUE(contains(bad.output, "node1_rc=5")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "node0_rc=5")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "another node failed")) << bad.output;
}

// Rank 3 (node 1) is killed and rank 0 (node 0) aborts a moment later, as a
// collective across nodes would: node 0 names node 1's worker as the cause,
// not its own rank 0. Rank 0 aborts 0.3 s after rank 3 is gone: more than the
// supervisors' detection delays differ on a loaded machine, less than node 1
// takes to announce the failure (it first waits for the other nodes' records).
TEST(Dtrun, AcrossNodesTheFirstFailureIsTheCause) {
  const std::string pid_file =
      ::testing::TempDir() + "dtrun_rank3_" + std::to_string(getpid()) + ".pid";
  const std::string script =
      R"(sh -c "f=)" + pid_file +
      R"(; if [ \$RANK = 3 ]; then echo \$\$ > \$f.tmp; mv \$f.tmp \$f; sleep 0.5; kill -9 \$\$; fi; )"
      R"(while [ ! -s \$f ]; do :; done; p=\$(cat \$f); while [ -e /proc/\$p ]; do :; done; )"
      R"([ \$RANK = 0 ] && sleep 0.3 && kill -ABRT \$\$; sleep 30")";
  auto r = run_command(
      two_nodes("--nproc-per-node=2 " + script, "--nproc-per-node=2 " + script, unused_port()), 60);
  std::remove(pid_file.c_str());
  EXPECT_TRUE(contains(r.output, "node1_rc=137")) << r.output;
  EXPECT_TRUE(contains(r.output, "node0_rc=137")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "node 1 failed first: worker rank 3 was killed by signal 9 (Killed); on "
                       "this node, worker rank 0 was killed by signal 6 (Aborted)"))
      << r.output;
}

// --max-restarts with two nodes: a worker failing on one node stops every
// node's workers, and all start the next attempt together (the attempt
// number in TORCHELASTIC_RESTART_COUNT); a node whose workers had already
// finished restarts too; once restarts run out the failure ends both nodes.
TEST(Dtrun, TwoNodesRestartTheWholeJobTogether) {
  const std::string common = "--nproc-per-node=2 --token=t --max-restarts=1 ";
  // Attempt 0: rank 3 (node 1) fails after a moment; node 0's workers exit 0
  // at once, rank 2 sleeps. Attempt 1: everyone prints and succeeds.
  std::string flaky =
      "sh -c \"a=\\$TORCHELASTIC_RESTART_COUNT; if [ \\$a = 0 ]; then "
      "if [ \\$RANK = 3 ]; then sleep 1; exit 5; fi; if [ \\$RANK = 2 ]; then sleep 60; fi; "
      "exit 0; fi; echo rank \\$RANK attempt \\$a\"";
  auto ok = run_command(two_nodes(common + flaky, common + flaky, unused_port()), 60);
  EXPECT_TRUE(contains(ok.output, "node1_rc=0")) << ok.output;
  EXPECT_TRUE(contains(ok.output, "node0_rc=0")) << ok.output;
  EXPECT_TRUE(contains(ok.output, "[rank 0]: rank 0 attempt 1")) << ok.output;
  EXPECT_TRUE(contains(ok.output, "[rank 3]: rank 3 attempt 1")) << ok.output;
  EXPECT_TRUE(contains(ok.output, "(1 of 1 restarts)")) << ok.output;

  std::string always = "sh -c \"if [ \\$RANK = 3 ]; then exit 5; fi; sleep 60\"";
  auto bad = run_command(two_nodes(common + always, common + always, unused_port()), 60);
  EXPECT_TRUE(contains(bad.output, "node1_rc=5")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "node0_rc=5")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "(1 of 1 restarts)")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "another node failed")) << bad.output;
}

// A node whose workers all finished does not report success while another
// node's worker fails later: every dtrun exits with the failing worker's code.
TEST(Dtrun, NodeThatFinishedFirstStillReportsTheJobsFailure) {
  std::string late = "sh -c \"if [ \\$RANK = 0 ]; then sleep 1; exit 7; fi\"";
  auto r = run_command(two_nodes("--nproc-per-node=2 --token=t " + late,
                                 "--nproc-per-node=2 --token=t " + late, unused_port()),
                       40);
  EXPECT_TRUE(contains(r.output, "node1_rc=7")) << r.output;
  EXPECT_TRUE(contains(r.output, "node0_rc=7")) << r.output;
  EXPECT_TRUE(contains(r.output, "another node failed: node 0: worker rank 0 exited with code 7"))
      << r.output;
}

TEST(Dtrun, NodeWhoseDtrunIsKilledIsNoticedAndItsWorkersDie) {
  int port = unused_port();
  std::string rdzv =
      " --rdzv=127.0.0.1:" + std::to_string(port) + " --token=t --heartbeat-timeout=3 ";
  // Every worker appends to its rank's tick file while it lives.
  std::string ticks = ::testing::TempDir() + "ticks_" + std::to_string(getpid()) + "_";
  std::string worker = " sh -c \"while true; do echo t >> " + ticks + "\\$RANK; sleep 0.1; done\"";
  // Node 1's dtrun is killed once its worker runs; node 0 must notice the
  // silence, and node 1's worker must not outlive its dtrun (its ticks stop).
  auto r = run_command(
      "rm -f " + ticks + "*; " +
          dtrun("--nnodes=2 --node-rank=0 --nproc-per-node=1" + rdzv + worker) +
          " > /tmp/h0.$$ 2>&1 & p0=$!; " +
          dtrun("--nnodes=2 --node-rank=1 --nproc-per-node=1" + rdzv + worker) +
          " > /dev/null 2>&1 & p1=$!; "
          "for i in $(seq 100); do [ -s " +
          ticks +
          "1 ] && break; sleep 0.2; done; "
          "[ -s " +
          ticks +
          "1 ] && echo worker1_started; kill -9 $p1; wait $p0; echo node0_rc=$?; "
          "a=$(wc -l < " +
          ticks + "1); sleep 1; b=$(wc -l < " + ticks +
          "1); "
          "if [ \"$a\" = \"$b\" ]; then echo worker1_gone; else echo worker1_alive $a $b; fi; "
          "cat /tmp/h0.$$; rm -f /tmp/h0.$$ " +
          ticks + "*",
      60);
  EXPECT_TRUE(contains(r.output, "node0_rc=1")) << r.output;
  // Its held heartbeat closes with it (then at once), or it falls silent.
  EXPECT_TRUE(contains(r.output, "node 1 (127.0.0.1) was lost") ||
              contains(r.output, "node 1 (127.0.0.1) has not been heard from"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "worker1_started")) << r.output;
  EXPECT_TRUE(contains(r.output, "worker1_gone")) << r.output;
}

// A host that stops answering (SIGSTOP: no connection closes, as in a
// partition) is given up on once it has been silent for --heartbeat-timeout
// (3 s here), not earlier and not much later, and the message says so.
TEST(Dtrun, AHostThatStopsAnsweringIsGivenUpOnAtTheTimeout) {
  int port = unused_port();
  std::string rdzv =
      " --rdzv=127.0.0.1:" + std::to_string(port) + " --token=t --heartbeat-timeout=3 ";
  const std::string worker = " sh -c \"echo up; while true; do sleep 0.1; done\"";
  auto r = run_command(
      dtrun("--nnodes=2 --node-rank=0 --nproc-per-node=1" + rdzv + worker) +
          " > /dev/null 2>&1 & p0=$!; " +
          dtrun("--nnodes=2 --node-rank=1 --nproc-per-node=1" + rdzv + worker) +
          " > /tmp/h1.$$ 2>&1 & p1=$!; "
          "for i in $(seq 100); do grep -q up /tmp/h1.$$ && break; sleep 0.1; done; sleep 1; "
          "kill -STOP $p0; t0=$(date +%s%N); wait $p1; echo node1_rc=$?; t1=$(date +%s%N); "
          "echo waited_ms=$(( (t1 - t0) / 1000000 )); kill -9 $p0; kill -CONT $p0; "
          "cat /tmp/h1.$$; rm -f /tmp/h1.$$",
      60);
  EXPECT_TRUE(contains(r.output, "node1_rc=1")) << r.output;
  EXPECT_TRUE(contains(r.output, "has not answered for 3 s (--heartbeat-timeout)")) << r.output;
  const auto at = r.output.find("waited_ms=");
  ASSERT_NE(at, std::string::npos) << r.output;
  const long ms = std::stol(r.output.substr(at + 10));
  // From the last answer (at most a hold, 1 s, before the stop) plus 3 s,
  // and the workers' stop.
  EXPECT_GE(ms, 1900) << r.output;
  EXPECT_LE(ms, 5000) << r.output;
}

// A fixed-size job whose node 1 is stopped by SIGTERM: node 0 says so (not
// its own workers' failures), and both nodes exit with the same code.
TEST(Dtrun, ATerminatedNodeIsNamedAndBothNodesExitAlike) {
  int port = unused_port();
  std::string rdzv = " --rdzv=127.0.0.1:" + std::to_string(port) + " --token=t ";
  const std::string worker = " sh -c \"echo up; while true; do sleep 0.1; done\"";
  auto r =
      run_command(dtrun("--nnodes=2 --node-rank=0 --nproc-per-node=1" + rdzv + worker) +
                      " > /tmp/t0.$$ 2>&1 & p0=$!; " +
                      dtrun("--nnodes=2 --node-rank=1 --nproc-per-node=1" + rdzv + worker) +
                      " > /tmp/t1.$$ 2>&1 & p1=$!; "
                      "for i in $(seq 100); do grep -q up /tmp/t1.$$ && break; sleep 0.1; "
                      "done; sleep 0.5; kill -TERM $p1; wait $p1; echo node1_rc=$?; "
                      "wait $p0; echo node0_rc=$?; cat /tmp/t0.$$; rm -f /tmp/t0.$$ /tmp/t1.$$",
                  60);
  EXPECT_TRUE(contains(r.output, "node1_rc=143")) << r.output;
  EXPECT_TRUE(contains(r.output, "node0_rc=143")) << r.output;
  EXPECT_TRUE(contains(r.output, "node 1: its dtrun received Terminated")) << r.output;
}

// What a worker started (a wrapper's child, in the worker's process group)
// dies with a dtrun killed by SIGKILL: the parent-death signal reaches only
// the wrapper; the guard takes the rest.
TEST(Dtrun, NothingAWorkerStartedOutlivesAKilledDtrun) {
  const std::string pidfile = ::testing::TempDir() + "sleeper_" + std::to_string(getpid());
  auto r = run_command(
      "rm -f " + pidfile + "; " +
          dtrun("--nproc-per-node=1 sh -c \"sleep 300 & echo \\$! > " + pidfile + "; wait\"") +
          " > /dev/null 2>&1 & p=$!; "
          "for i in $(seq 100); do [ -s " +
          pidfile + " ] && break; sleep 0.1; done; s=$(cat " + pidfile +
          "); kill -0 $s && echo sleeper_started; kill -9 $p; "
          "for i in $(seq 30); do kill -0 $s 2>/dev/null || break; sleep 0.1; done; "
          "if kill -0 $s 2>/dev/null; then echo sleeper_alive; kill -9 $s; else echo sleeper_gone; "
          "fi; rm -f " +
          pidfile,
      60);
  EXPECT_TRUE(contains(r.output, "sleeper_started")) << r.output;
  EXPECT_TRUE(contains(r.output, "sleeper_gone")) << r.output;
}

// A worker's descendant that left its process group and session (setsid)
// dies with a dtrun killed by SIGKILL too: the guard finds it by the tag in
// its environment. And so does one whose parent ended (orphaned).
TEST(Dtrun, ADescendantThatCalledSetsidDiesWithAKilledDtrun) {
  const std::string base = ::testing::TempDir() + "setsid_" + std::to_string(getpid());
  const std::string pidfile = base + ".pids", script = base + ".sh";
  std::ofstream(script) << "setsid sleep 300 &\n"
                           "echo $! > "
                        << pidfile << ".tmp\n"
                        << "sh -c 'sleep 300 & echo $! >> " << pidfile << ".tmp'\n"
                        << "mv " << pidfile << ".tmp " << pidfile << "\n"
                        << "sleep 300\n";
  auto r = run_command(
      "rm -f " + pidfile + "; " + dtrun("--nproc-per-node=1 sh " + script) +
          " > /dev/null 2>&1 & p=$!; "
          "for i in $(seq 100); do [ -s " +
          pidfile + " ] && break; sleep 0.1; done; a=$(sed -n 1p " + pidfile + "); b=$(sed -n 2p " +
          pidfile +
          "); kill -0 $a && kill -0 $b && echo sleepers_started; "
          "[ \"$(ps -o sid= -p $a)\" != \"$(ps -o sid= -p $p)\" ] && echo own_session; "
          "kill -9 $p; "
          "for i in $(seq 30); do kill -0 $a 2>/dev/null || kill -0 $b 2>/dev/null || break; "
          "sleep 0.1; done; "
          "for s in $a $b; do if kill -0 $s 2>/dev/null; then echo alive_$s; kill -9 $s; fi; done; "
          "echo checked; rm -f " +
          pidfile + " " + script,
      60);
  EXPECT_TRUE(contains(r.output, "sleepers_started")) << r.output;
  EXPECT_TRUE(contains(r.output, "own_session")) << r.output;
  EXPECT_TRUE(contains(r.output, "checked")) << r.output;
  EXPECT_FALSE(contains(r.output, "alive_")) << r.output;
}

// A stopped worker is woken with the SIGTERM, so that the grace period is
// its to use (it handles the signal and exits 0, not SIGKILL after 5 s).
TEST(Dtrun, AStoppedWorkerGetsSigcontWithSigterm) {
  const std::string script = ::testing::TempDir() + "stopped_" + std::to_string(getpid()) + ".sh";
  std::ofstream(script) << "trap 'echo got_term; exit 0' TERM\n"
                           "kill -STOP $$\n"
                           "while true; do sleep 0.1; done\n";
  auto r =
      run_command(dtrun("--nproc-per-node=1 --grace-period=20 sh " + script) +
                      " 2>&1 & p=$!; sleep 1; kill -TERM $p; wait $p; echo rc=$?; rm -f " + script,
                  30);
  EXPECT_TRUE(contains(r.output, "got_term")) << r.output;
  EXPECT_FALSE(contains(r.output, "sending SIGKILL")) << r.output;
}

// dtrun doctor: the table of checks, an exit code of 1 exactly when one is an
// error, and the job's own flags checked (a held port, a name that does not
// resolve, NCCL_SOCKET_IFNAME that matches nothing).
TEST(Dtrun, DoctorPrintsItsChecksAndFailsOnlyOnErrors) {
  auto r = run_command(dtrun("doctor"));
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.output;
  for (const char* check : {"GPUs", "NCCL socket interface", "/dev/shm", "memlock", "rendezvous"})
    EXPECT_TRUE(contains(r.output, check)) << "missing " << check << ":\n" << r.output;
  EXPECT_EQ(r.exit_code == 1, contains(r.output, "ERROR")) << r.output;

  HeldPort held;
  r = run_command(dtrun("doctor --nproc-per-node=1 --rdzv=127.0.0.1:" + std::to_string(held.port) +
                        " ./train --lr 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "ERROR  127.0.0.1:" + std::to_string(held.port))) << r.output;
  EXPECT_TRUE(contains(r.output, "pick another --rdzv port")) << r.output;
  // The program is looked for as the job would (not run).
  EXPECT_TRUE(contains(r.output, "ERROR  cannot run './train': no such file")) << r.output;
  r = run_command(dtrun("doctor true --not-a-dtrun-flag"));
  EXPECT_TRUE(contains(r.output, "program                 ok     /")) << r.output;
  // Across nodes, the held port is tried as another node's rendezvous first.
  r = run_command(
      dtrun("doctor --nnodes=2 --rdzv-timeout=2 --rdzv=127.0.0.1:" + std::to_string(held.port)),
      30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "does not answer as a dtrun rendezvous")) << r.output;
  EXPECT_TRUE(contains(r.output, "pick another --rdzv port")) << r.output;

  r = run_command(dtrun("doctor --nnodes=2 --rdzv=no-such-host.invalid:29500"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "no-such-host.invalid")) << r.output;

  r = run_command("NCCL_SOCKET_IFNAME==nosuch0 " + dtrun("doctor"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "NCCL_SOCKET_IFNAME==nosuch0")) << r.output;

  r = run_command(dtrun("doctor --nproc-per-node=x"));
  EXPECT_EQ(r.exit_code, 2) << r.output;

  // --bench: the workers (dtrun itself) time an all-reduce.
  r = run_command(dtrun("doctor --bench --nproc-per-node=2"));
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "[rank 0]: doctor --bench: all-reduce of 8 MiB through gloo, 2 "
                       "workers on 1 node(s)"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "within node 0")) << r.output;
}

}  // namespace
}  // namespace rtd
