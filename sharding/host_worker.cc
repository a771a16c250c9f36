#include "sharding/host_worker.h"

#include <utility>

namespace rtd {

HostWorker::HostWorker() : thread_([this] { run(); }) {}

HostWorker::~HostWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::uint64_t HostWorker::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
  return ++posted_;
}

void HostWorker::wait(std::uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ >= ticket || error_; });
  if (error_) std::rethrow_exception(error_);
}

void HostWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    if (!error_) {
      lock.unlock();
      std::exception_ptr failed;
      try {
        task();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed) error_ = failed;
    }
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace rtd
