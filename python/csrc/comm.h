// Comm: one librt_dist communicator of a group (Gloo for host tensors, NCCL
// for one GPU's), made at the first call that needs it, and the operations
// of it whose Works were dropped before anyone waited for them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <atomic>
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
  // A failure of this communicator was handed to the program (thrown, or
  // set in a Work's future): not one to report at exit.
  void note_raised() const { raised_ = true; }
  // Its failure, if it failed and nothing raised it; "" if not.
  std::string unraised_failure() const;

  // The pool stream on which a GPU operation's finishing steps run.
  const c10::Stream& finishing_stream();

  // An operation whose Work was dropped unwaited: its tensors stay alive
  // until it (and its finishing steps, `done`) completed.
  void keep_until_done(rtd_work* work, std::vector<at::Tensor> tensors,
                       std::optional<c10::Event> done, std::string what);
  void reap();
  // An operation failed whose Work nobody waited for (what: the Work's name).
  void note_unraised(std::string what);

 private:
  struct Dropped {
    rtd_work* work;
    std::vector<at::Tensor> tensors;
    std::optional<c10::Event> done;
    std::string what;
  };

  StoreBridge bridge_;
  CommOptions options_;
  rtd_comm* handle_ = nullptr;
  std::optional<c10::Stream> finishing_;
  mutable std::mutex dropped_mu_;
  std::deque<Dropped> dropped_;
  mutable std::atomic<bool> raised_{false};
  std::vector<std::string> unraised_ops_;  // guarded by dropped_mu_
};

// The failures of communicators, live or destroyed, that nothing handed to
// the program: a collective that failed after its call returned, whose Work
// nobody waited for. rt_dist.torch reports them when the interpreter exits
// and makes the process fail, so that a job never ends as a success with a
// collective that did not happen.
std::vector<std::string> unraised_failures();

}  // namespace rtd_torch
