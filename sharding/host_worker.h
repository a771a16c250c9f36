// HostWorker: one background thread that runs tasks in the order they were
// given, for the offloaded optimizer's host work (each unit's AdamW step while
// backward goes on). A task's ticket says when it has run; the first task that
// throws stops the worker, and its error is rethrown to whoever waits next.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace rtd {

class HostWorker {
 public:
  HostWorker();
  ~HostWorker();  // runs what was given, then stops; errors are dropped
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // Queues task; returns its ticket (1, 2, ...).
  std::uint64_t post(std::function<void()> task);
  // Blocks until task `ticket` (and every one before it) has run; rethrows a
  // task's error (then every later wait rethrows it too).
  void wait(std::uint64_t ticket);
  void wait_all() { wait(posted_); }
  std::uint64_t posted() const { return posted_; }  // the last ticket given

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t posted_ = 0, done_ = 0;  // posted_: the owner's thread only
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rtd
