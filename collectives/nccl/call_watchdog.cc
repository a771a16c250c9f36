// CallWatchdog: a thread that looks at the call in flight a few times per timeout.
#include "collectives/nccl/call_watchdog.h"

#include <algorithm>

namespace rtd::nccl {

CallWatchdog::CallWatchdog(std::chrono::milliseconds timeout,
                           std::function<void(const std::string&)> on_expire,
                           std::function<void()> tick)
    : timeout_(timeout),
      on_expire_(std::move(on_expire)),
      tick_(std::move(tick)),
      thread_([this] { run(); }) {}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CallWatchdog::begin(const char* what) {
  what_.store(what, std::memory_order_relaxed);
  const std::uint64_t call = calls_.load(std::memory_order_relaxed) + 1;
  calls_.store(call, std::memory_order_relaxed);
  in_call_.store(call, std::memory_order_release);  // after what_
}

void CallWatchdog::end() { in_call_.store(0, std::memory_order_release); }

void CallWatchdog::run() {
  const auto poll =
      std::clamp(timeout_ / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
  std::uint64_t seen_call = 0;  // the call in flight at the last poll (0: none)
  std::chrono::steady_clock::time_point seen_at;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, poll, [&] { return stopping_; })) {
    if (tick_) {
      lock.unlock();
      tick_();
      lock.lock();
      if (stopping_) break;
    }
    const std::uint64_t call = in_call_.load(std::memory_order_acquire);
    // A call's clock starts when this thread first sees it (a poll after it
    // began at most): begin() reads no clock.
    if (call != seen_call) {
      seen_call = call;
      seen_at = std::chrono::steady_clock::now();
      continue;
    }
    if (call == 0 || std::chrono::steady_clock::now() - seen_at < timeout_) continue;
    if (in_call_.load(std::memory_order_acquire) != call) continue;  // that call just ended
    fired_ = true;
    std::string what = what_.load(std::memory_order_relaxed);
    lock.unlock();
    on_expire_(what + " was still inside NCCL after " + std::to_string(timeout_.count()) +
               " ms (a peer may be missing or stuck)");
    lock.lock();
    // One expiry per call: wait for it to end before watching again.
    while (!stopping_ && in_call_.load(std::memory_order_acquire) == call) {
      cv_.wait_for(lock, poll);
    }
  }
}

}  // namespace rtd::nccl
