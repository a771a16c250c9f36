// Work: the handle of one asynchronous collective. Thread-safe.
//
// [Stream order] A GPU operation is ordered after what the caller's stream held
// when it was called (an event recorded there, waited on by the communicator's
// own stream). Work::wait(stream) orders a stream after the operation the same
// way. Neither blocks the host. The buffers must stay alive until the
// operation completes (done(), wait(), or later work on a stream ordered
// after it).
#pragma once

#include <chrono>
#include <optional>

#include "rt_dist/error.h"

namespace rtd {

// A CUDA stream as an opaque handle, so that CPU-only code needs no CUDA headers.
struct StreamRef {
  void* cuda_stream = nullptr;
};

class Work {
 public:
  virtual ~Work() = default;

  // True once the operation finished, successfully or not. Never blocks.
  [[nodiscard]] virtual bool done() const = 0;
  // Blocks the host until done or until the communicator's timeout passes;
  // rethrows the operation's error, or throws rtd::Error(kTimeout).
  virtual void wait() = 0;
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Orders stream after the operation without blocking the host (no-op for CPU work).
  virtual void wait(StreamRef stream) = 0;
  // The operation's error once done; empty while running or on success.
  [[nodiscard]] virtual std::optional<Error> error() const = 0;
  // A receive from Communicator::kAnySource, once done: the rank it came
  // from; -1 for every other operation.
  [[nodiscard]] virtual int source() const { return -1; }
};

}  // namespace rtd
