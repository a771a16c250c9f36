// CpuWork: completion state under a mutex, waited on with a deadline.
#include "collectives/cpu_work.h"

namespace rtd {

CpuWork::CpuWork(std::string what, std::chrono::milliseconds default_timeout)
    : what_(std::move(what)), default_timeout_(default_timeout) {}

void CpuWork::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;  // failed first (by an abort): stays failed
    done_ = true;
  }
  cv_.notify_all();
}

void CpuWork::complete_from(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    source_ = rank;
    done_ = true;
  }
  cv_.notify_all();
}

int CpuWork::source() const {
  std::lock_guard<std::mutex> lock(mu_);
  return source_;
}

void CpuWork::fail(const Error& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;  // the first outcome stands (an abort races the operation's own)
    error_ = error;
    done_ = true;
  }
  cv_.notify_all();
}

bool CpuWork::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void CpuWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw Error(ErrorCategory::kTimeout, what_ + " did not complete within " +
                                             std::to_string(timeout.count()) +
                                             " ms; a peer may have failed or not called it");
  }
  if (error_) throw *error_;
}

std::optional<Error> CpuWork::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace rtd
