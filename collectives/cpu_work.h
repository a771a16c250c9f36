// CpuWork: the Work of an operation that a background thread runs on the host
// (Gloo, MPI). Completed or failed by that thread (or failed by an abort:
// the first outcome stands); waited on by the caller.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "rt_dist/work.h"

namespace rtd {

class CpuWork : public Work {
 public:
  // what: the operation and its sequence number, for timeout messages.
  CpuWork(std::string what, std::chrono::milliseconds default_timeout);

  void complete();
  // A receive from any source: complete, from `rank`.
  void complete_from(int rank);
  void fail(const Error& error);

  bool done() const override;
  void wait() override { wait(default_timeout_); }
  void wait(std::chrono::milliseconds timeout) override;
  void wait(StreamRef) override {}  // host memory: nothing for a stream to wait on
  std::optional<Error> error() const override;
  int source() const override;

 private:
  void settle(std::optional<Error> error, int source);

  const std::string what_;
  const std::chrono::milliseconds default_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::optional<Error> error_;
  int source_ = -1;
};

}  // namespace rtd
