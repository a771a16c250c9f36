// Comm: one librt_dist communicator of a group (Gloo for host tensors, NCCL
// for one GPU's), made at the first call that needs it, and the operations
// of it whose Works were dropped before anyone waited for them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "rt_dist/c_api.h"
#include "store_bridge.h"

namespace rtd_torch {

struct CommOptions {
  bool cuda = false;
  int device = -1;  // the GPU, for cuda
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{1800000};
  bool copy_engines = false;
  bool high_priority_stream = false;  // the NCCL communicator's stream
  std::string name;                   // in messages: "rtd group of 2 cuda"
};

class Comm {
 public:
  // Collective: every rank of the group makes it at the same call.
  Comm(c10::intrusive_ptr<c10d::Store> store, CommOptions options);
  ~Comm();  // finishes (or, past the timeout, aborts) what is in flight
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  rtd_comm* handle() const { return handle_; }
  bool cuda() const { return options_.cuda; }
  int device() const { return options_.device; }
  const CommOptions& options() const { return options_; }

  // Throws once the communicator has failed (an asynchronous NCCL error, an
  // operation past its timeout, an abort): the failure is raised at the
  // next call or wait, never injected into a thread.
  void check(const std::string& where) const;
  void abort();

  // The pool stream on which a GPU operation's finishing steps run.
  const c10::Stream& finishing_stream();

  // An operation whose Work was dropped unwaited: its tensors stay alive
  // until it (and its finishing steps, `done`) completed.
  void keep_until_done(rtd_work* work, std::vector<at::Tensor> tensors,
                       std::optional<c10::Event> done);
  void reap();

 private:
  struct Dropped {
    rtd_work* work;
    std::vector<at::Tensor> tensors;
    std::optional<c10::Event> done;
  };

  StoreBridge bridge_;
  CommOptions options_;
  rtd_comm* handle_ = nullptr;
  std::optional<c10::Stream> finishing_;
  std::mutex dropped_mu_;
  std::deque<Dropped> dropped_;
};

}  // namespace rtd_torch
