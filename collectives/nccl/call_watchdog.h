// CallWatchdog: bounds the host calls into NCCL that can block (a blocking
// communicator's collective waiting on a peer that never connects, a split, a
// group end). One thread per communicator polls a few times per timeout; if a
// call stays in flight past the timeout, it runs on_expire (which aborts the
// communicator, so the call returns): a call is timed from the first poll
// that sees it, so it is cut off between one and one and a fifth timeouts
// after it began. begin() and end() are plain stores: no clock, no lock, no
// read-modify-write on the data path. tick, when given, runs at every poll
// (the communicator checks its operations in flight there).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace rtd::nccl {

class CallWatchdog {
 public:
  CallWatchdog(std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_expire,
               std::function<void()> tick = {});
  ~CallWatchdog();  // stops and joins the thread
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  // what must outlive the call (a string literal).
  void begin(const char* what);
  void end();
  // True once a call overran and on_expire ran.
  bool fired() const { return fired_.load(); }

  // Brackets one call: begin() on construction, end() on destruction.
  class Scope {
   public:
    Scope(CallWatchdog& dog, const char* what) : dog_(dog) { dog_.begin(what); }
    ~Scope() { dog_.end(); }

   private:
    CallWatchdog& dog_;
  };

 private:
  void run();

  const std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> on_expire_;
  std::function<void()> tick_;
  // The call in flight (its number, from 1), or 0 between calls. Every
  // end() stores 0 after its begin(), so even two threads that broke the one
  // caller at a time rule leave 0 once both returned.
  std::atomic<std::uint64_t> in_call_{0};
  std::atomic<std::uint64_t> calls_{0};  // begin()s so far (numbers the calls)
  std::atomic<const char*> what_{""};
  std::atomic<bool> fired_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rtd::nccl
