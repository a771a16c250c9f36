// WorkRTD: the c10d::Work of one librt_dist operation, as DDP's reducer,
// FSDP2 and scripts use ProcessGroupNCCL's:
// - a GPU operation runs on the communicator's stream, ordered after the
//   caller's current stream; wait() orders the caller's current stream after
//   it without blocking the host (a barrier's wait blocks the host, and so
//   does a wait given a timeout, which fails once it passes);
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
  // `op` names the operation in torch's profiler ("rtd:<op>"); `what`
  // in errors.
  WorkRTD(std::shared_ptr<Comm> comm, rtd_work* handle, c10d::OpType type, const char* op,
          std::string what, Finish finish);
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
  void end_profiling();  // the profiler's span ends where the caller saw it done

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

// The Work of what the backend does without librt_dist:
// - a send to this rank itself or a receive from it, done when both are
//   posted, the data then copied on the caller's current stream (as NCCL
//   does a rank's send to itself within a group); pending, wait() blocks
//   until its other half is posted or the timeout passes;
// - a send or receive queued between startCoalescing and endCoalescing
//   (done at once: the batch's Work, from endCoalescing, is the one to wait).
class LocalWork : public c10d::Work {
 public:
  // `op`: its name in torch's profiler, as WorkRTD's.
  LocalWork(c10d::OpType type, const char* op, int rank, std::vector<at::Tensor> outputs);
  // Done; with an error, failed (wait() and the future raise it).
  void complete(std::exception_ptr error = nullptr);
  // A Work done at once, with no result.
  static c10::intrusive_ptr<LocalWork> done(c10d::OpType type, const char* op, int rank);
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  int sourceRank() const override { return rank_; }

 private:
  int rank_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of several operations launched between startCoalescing and
// endCoalescing: done when each is; wait() waits for each in turn.
class BatchWork : public c10d::Work {
 public:
  explicit BatchWork(std::vector<c10::intrusive_ptr<c10d::Work>> works);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override { wait(); }
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

// torch profiler's name of an operation, "rtd:<op>", or none while no
// profiler listens (c10d::Work then records nothing).
const char* profiling_title(const char* op);

}  // namespace rtd_torch
