// WorkRTD: the c10d::Work of one librt_dist operation, as DDP's reducer,
// FSDP2 and scripts use ProcessGroupNCCL's:
// - a GPU operation runs on the communicator's stream, ordered after the
//   caller's current stream; wait() orders the caller's current stream after
//   it without blocking the host (a barrier's wait blocks the host);
// - a host operation's wait() blocks until it is done;
// - getFuture() completes with the outputs (GPU: at once, its events
//   recorded after the operation; host: when it is done);
// - a failure is thrown by wait() (and by the next call into the group),
//   naming the rank and the collective.
// The tensors an operation uses stay alive until a wait() ordered the caller
// after it, or, for a Work dropped unwaited, until it is done (Comm::reap).
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "comm.h"

namespace rtd_torch {

// What an operation needs after its launch.
struct Finish {
  std::vector<at::Tensor> keep;     // alive until it is done
  std::vector<at::Tensor> outputs;  // the future's value
  // A step after the operation (copying out of a staging buffer): on the
  // host once it is done, or on the GPU on the finishing stream.
  std::function<void()> after;
  bool blocking = false;  // wait() blocks the host (barrier)
};

class WorkRTD : public c10d::Work {
 public:
  // Takes `handle` (freed with the Work). A GPU operation's finishing step
  // is queued here, at its launch.
  WorkRTD(std::shared_ptr<Comm> comm, rtd_work* handle, c10d::OpType type, std::string what,
          Finish finish);
  ~WorkRTD() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override { wait(); }
  std::vector<at::Tensor> result() override { return finish_.outputs; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  int sourceRank() const override;  // a receive from any source, once done

 private:
  bool done() const;
  // Host: waits, then the finishing step; once. Throws a failure.
  void finish_host(std::chrono::milliseconds timeout);
  void throw_if_failed();

  std::shared_ptr<Comm> comm_;
  rtd_work* handle_;
  std::string what_;  // "rtd all_reduce on rank 0 of 2"
  Finish finish_;
  std::optional<c10::Event> done_;  // GPU: after the finishing step
  mutable std::mutex mu_;
  bool finished_ = false;  // host: waited and finished; GPU: the caller was ordered after it
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace rtd_torch
