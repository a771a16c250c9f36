// CpuWork: completion state under a mutex, waited on with a deadline.
#include "collectives/cpu_work.h"

namespace rtd {

CpuWork::CpuWork(std::string what, std::chrono::milliseconds default_timeout)
    : what_(std::move(what)), default_timeout_(default_timeout) {}

void CpuWork::complete() { settle(std::nullopt, -1); }

void CpuWork::complete_from(int rank) { settle(std::nullopt, rank); }

void CpuWork::fail(const Error& error) { settle(error, -1); }

// The first outcome stands: an abort races the operation's own, and a work
// failed by the abort stays failed.
void CpuWork::settle(std::optional<Error> error, int source) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    error_ = std::move(error);
    source_ = source;
    done_ = true;
  }
  cv_.notify_all();
}

int CpuWork::source() const {
  std::lock_guard<std::mutex> lock(mu_);
  return source_;
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
