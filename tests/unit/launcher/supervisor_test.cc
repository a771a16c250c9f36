// The supervisor's workers and signals, with /bin/sh as the worker.
#include "launcher/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

namespace rtd::launcher {
namespace {

WorkerSpec spec(int rank) { return WorkerSpec{.global_rank = rank, .local_rank = rank, .env = {}}; }

SupervisorOptions shell(const std::string& script) {
  return SupervisorOptions{.program_path = "/bin/sh",
                           .args = {"-c", script},
                           .console_stdout = false,
                           .console_stderr = false};
}

// In-process recovery tells workers of a move by SIGUSR1. A worker that has
// not yet installed its handler (a replacement still starting) is not ended
// by it: the signal is ignored across exec until the trainer handles it.
TEST(Supervisor, AWorkerStillStartingSurvivesTheMoveSignalUnderInProcessRecovery) {
  SupervisorOptions options = shell("sleep 1; exit 0");
  options.replace = [](const std::vector<int>&, const std::string&) {
    return std::optional<std::vector<WorkerSpec>>();
  };
  Supervisor supervisor(std::move(options));
  supervisor.start({spec(0)});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  supervisor.signal_workers(SIGUSR1);
  const Outcome out = supervisor.watch(nullptr, std::chrono::milliseconds(50));
  EXPECT_EQ(out.ending, Ending::kSuccess) << out.reason;
}

// Without in-process recovery nothing sends it, and a worker's signals are its own.
TEST(Supervisor, WithoutInProcessRecoveryTheMoveSignalKeepsItsDefault) {
  Supervisor supervisor(shell("sleep 1; exit 0"));
  supervisor.start({spec(0)});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  supervisor.signal_workers(SIGUSR1);
  const Outcome out = supervisor.watch(nullptr, std::chrono::milliseconds(50));
  EXPECT_EQ(out.ending, Ending::kWorkerFailed);
  EXPECT_EQ(out.exit_code, 128 + SIGUSR1) << out.reason;
}

}  // namespace
}  // namespace rtd::launcher
