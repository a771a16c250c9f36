// PendingAborts: NCCL's aborts, run on threads of their own so that the
// aborting caller goes on at once.
//
// ncclCommAbort sets the communicator's abort flag first (its kernels stop
// then) and returns only once its proxy service thread has seen that flag,
// which the thread polls for between waits of up to 500 ms: most of every
// abort, and so of every in-process recovery, went to a thread waking up
// (docs/performance.md, torch-recovery-one-gpu). No caller needs that wait: an aborted communicator
// is never used again, and memory its kernels were using is reused only in the streams' order,
// after those kernels end. So each abort runs here, and the process's exit waits (up to a bound)
// for those still running, so that none is cut off inside NCCL.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

namespace rtd::nccl {

class PendingAborts {
 public:
  // The process's own (never destroyed; its exit waits for what is running).
  static PendingAborts& instance();

  // Runs abort on a new thread and returns at once.
  void start(std::function<void()> abort);
  // Waits until every abort started so far has returned, up to bound; false
  // when some are still running.
  bool wait_all(std::chrono::milliseconds bound);

 private:
  PendingAborts();
  struct State {
    std::mutex mu;
    std::condition_variable done;
    int running = 0;
  };
  std::shared_ptr<State> state_;  // shared with the threads
};

}  // namespace rtd::nccl
