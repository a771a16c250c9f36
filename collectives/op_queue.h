// OpQueue: one background thread that runs a communicator's operations in the
// order they were posted, so that callers overlap compute with communication.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace rtd {

class OpQueue {
 public:
  OpQueue();
  ~OpQueue();  // runs what was posted, then joins
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // The task must not throw: it records its outcome in its own Work.
  void post(std::function<void()> task);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rtd
