// Supervisor: starts this node's workers (fork/exec, each in its own process
// group), watches them, forwards signals, and stops the rest when one fails:
// SIGTERM, the grace period, then SIGKILL.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/log_mux.h"
#include "launcher/orphan_guard.h"

namespace rtd::launcher {

struct WorkerSpec {
  int global_rank = 0;
  int local_rank = 0;
  std::vector<std::string> env;  // KEY=VALUE, the whole environment
};

struct SupervisorOptions {
  std::string program_path;  // resolved, executable
  std::vector<std::string> args;
  std::string log_dir;  // empty: no files
  // What reaches dtrun's own stdout/stderr (with log_dir, files get it all):
  // torchrun's --redirects, and --local-ranks-filter (empty: every local rank).
  bool console_stdout = true;
  bool console_stderr = true;
  std::vector<int> console_local_ranks;
  int attempt = 0;
  std::chrono::seconds grace_period{5};
  OrphanGuard* guard = nullptr;  // told each worker's process group (may be null)
  // Called with a signal dtrun received, before it is forwarded to the workers.
  std::function<void(int)> on_signal;
  // In-process recovery: given the local ranks of the workers that just
  // failed (and why), the specs to start them with again, alone, while the
  // others keep running; nullopt: not this time (the round ends as for any
  // failure).
  std::function<std::optional<std::vector<WorkerSpec>>(const std::vector<int>& local_ranks,
                                                       const std::string& why)>
      replace;
  // Spares (--spare-workers, with replace): Python interpreters started
  // beside the workers as `PROGRAM -m rt_dist.spare ARGS` (python/rt_dist/spare.py)
  // that import torch and wait on a socket; a failed worker's replacement
  // is a spare sent its environment and output pipes instead of a process
  // started anew, and another spare is started behind it. spare_env: a
  // spare's environment (the node's first worker's; the real one comes
  // with the activation).
  int spares = 0;
  std::function<std::vector<std::string>()> spare_env;
};

enum class Ending { kSuccess, kWorkerFailed, kSignal, kStopRequested };

struct Outcome {
  Ending ending = Ending::kSuccess;
  int exit_code = 0;  // the failing worker's code (128+N for signal N), or 128+signal
  int failed_rank = -1;
  std::string reason;
  // kWorkerFailed: when the first worker ended (wall clock, comparable across nodes).
  std::chrono::system_clock::time_point failed_at{};
  // kStopRequested because another node's worker failed in this round: the
  // job restarts where restarts are left.
  bool restart = false;
  // kStopRequested because the job's membership changes (a node joined, or one
  // was lost with enough left): the workers restart in the new round without
  // spending a restart.
  bool rejoin = false;
  // With rejoin: the host of the rounds was lost (the etcd backend finds the next).
  bool host_lost = false;
  // With rejoin: only because nodes were lost. With in-process recovery the
  // survivors' workers are kept (keep_workers: watch() returns without
  // stopping them) and move to the next round in place.
  bool node_lost = false;
  bool keep_workers = false;
};

// Returns nothing while the workers should go on, else the outcome to end with
// (a failure on another node, say).
using StopCheck = std::function<std::optional<Outcome>()>;

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options) : options_(std::move(options)) {}
  ~Supervisor();

  // Starts every worker; throws rtd::Error when one cannot be started.
  void start(const std::vector<WorkerSpec>& workers);
  // Blocks until all workers ended, one failed, a signal arrived or stop_check
  // (polled every poll_every) asked to stop; every worker has exited on return.
  Outcome watch(const StopCheck& stop_check, std::chrono::milliseconds poll_every);
  // In-process recovery moved the kept workers to a new round: their global
  // ranks there (first_rank + local rank), for what it logs.
  void renumber(int first_rank);
  // Sends sig to every running worker (not its process group).
  void signal_workers(int sig);

 private:
  struct Child {
    pid_t pid = -1;
    int rank = 0;
    int local_rank = 0;
    bool replaced = false;  // failed, and started again alone (in-process recovery)
    bool spare = false;     // a spare not yet made a worker (rank -1)
    int control = -1;       // a spare's socket (-1: none)
    bool ready = false;     // a spare that said its imports are done
    bool running = false;
    int status = 0;
    int pidfd = -1;  // readable when the worker ends (-1: kernel without pidfd_open)
    int batch = 0;   // which reap saw it end: workers seen together ended together
    std::chrono::steady_clock::time_point ended;
    std::chrono::system_clock::time_point ended_wall;
  };
  // Forks and execs a worker (or, spare, a spare with the program's args).
  void spawn(const WorkerSpec& spec, LogMux& mux, bool spare = false);
  // The output pipes' read ends of the worker of spec, to mux (and its log).
  void attach_output(int out, int err, int log_fd, const WorkerSpec& spec, LogMux& mux);
  // Spares up to options_.spares; one that cannot be started is logged.
  void add_spares(LogMux& mux);
  // Whether a spare has said it is ready (its byte), waiting until `until`
  // for it: a spare still importing is ahead of a process started anew, but
  // one whose imports then fail would end as the worker it was made, so a
  // spare is made a worker only once it has said so; one that says nothing
  // by then (or has died) is left, and the worker started anew. One
  // replacement waits kSpareReadyWait at most in all.
  static bool spare_ready(Child& c, std::chrono::steady_clock::time_point until);
  static constexpr std::chrono::milliseconds kSpareReadyWait{10'000};
  // Makes children_[i], a spare, the worker of spec; false: it could not be told.
  bool activate(std::size_t i, const WorkerSpec& spec, LogMux& mux);
  // The failed workers started again alone (options_.replace); false: not.
  bool replace_failed();
  void join_output();
  int reap(bool block);  // returns number reaped
  // Waits up to `timeout` for a worker to end, waking at once when one does.
  void wait_for_exit(std::chrono::milliseconds timeout);
  // The first worker to end with a failure: the earliest reap, and within it
  // the likeliest cause (killed by a signal other than SIGABRT/SIGTERM, then
  // a non-zero exit, then an abort: what a peer's failure typically causes);
  // nullptr: none.
  const Child* first_failure() const;
  Outcome failure_outcome(const Child& first, std::chrono::steady_clock::time_point stop) const;
  void stop_all(int sig);
  bool any_running() const;
  bool any_worker_running() const;  // not counting spares
  // SIGKILL to every worker's process group (a stopped member is woken to die).
  void kill_groups();

  SupervisorOptions options_;
  std::vector<Child> children_;
  int batches_ = 0;
  bool stopping_ = false;  // the spares' ends from here on are dtrun's doing
  LogMux mux_;
  std::vector<std::unique_ptr<LogMux>> late_mux_;  // the replacements' output
};

// Finds program on path (unless it contains '/'); throws rtd::Error(kConfig) when
// it does not exist or is not executable.
std::string resolve_program(const std::string& program, const std::string& path);

}  // namespace rtd::launcher
