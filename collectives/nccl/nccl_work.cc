// NcclWork: completion by event query, failure by async error, timeout by abort.
#include "collectives/nccl/nccl_work.h"

#include <thread>

#include "collectives/nccl/nccl_check.h"

namespace rtd::nccl {

NcclWork::~NcclWork() {
  if (captured_) state_->release_captured(end_);
}

bool NcclWork::done() const {
  if (captured_) return true;
  std::lock_guard<std::mutex> held(lock());
  if (complete_ || error_) return true;
  // An abort fails every operation not yet seen complete: after it, an end
  // event may fire over data a released wait or a cut-off kernel never wrote.
  if (auto failure = state_->failure()) {
    fail(
        Error(failure->category(), name_.text() + ": " + failure->what(), failure->backend_code()));
    return true;
  }
  // Retired (before or during the query: the slot may then be another
  // operation's): the in-flight list saw it complete.
  if (end_.retired()) {
    complete_ = true;
    return true;
  }
  // Covered by an end still to be recorded (record_pending records it, or
  // sets it aside into a capture: then done as a captured call is).
  if (end_.pending()) {
    try {
      state_->record_pending(end_);
    } catch (const Error& e) {
      fail(e);
      return true;
    }
  }
  if (end_.set_aside() || end_.retired()) {
    complete_ = true;
    return true;
  }
  cudaError_t rc;
  {
    RelaxedCapture relaxed(state_->cuda());  // another thread may be capturing
    rc = state_->cuda().event_query(end_.slot->event);
  }
  // cudaErrorCapturedEvent: recorded after it into a capture begun meanwhile
  // (CommState::overdue), which cannot say more.
  if (rc == cudaSuccess || rc == cudaErrorCapturedEvent || end_.retired()) {
    complete_ = true;
    return true;
  }
  if (rc != cudaErrorNotReady) {
    fail(Error(ErrorCategory::kBackend,
               name_.text() + ": CUDA error " + state_->cuda().error_string(rc), rc));
    return true;
  }
  return false;
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // Spin (yielding) for the first millisecond: short operations finish in
  // microseconds and a sleep costs tens of them.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  auto pause = std::chrono::microseconds(50);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string why = name_.text() + " did not complete within " +
                        std::to_string(timeout.count()) + " ms on rank " +
                        std::to_string(state_->rank()) +
                        "; a peer may have failed or not called it";
      if (std::string diagnosis = state_->diagnose(name_.recorded); !diagnosis.empty())
        why += "; " + diagnosis;
      state_->abort(why);
      std::lock_guard<std::mutex> held(lock());
      fail(Error(ErrorCategory::kTimeout, why + " (communicator aborted)"));
      throw *error_;
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }
  std::lock_guard<std::mutex> held(lock());
  if (error_) throw *error_;
}

void NcclWork::wait(StreamRef stream) {
  if (ran_on_ != nullptr && stream.cuda_stream == ran_on_) return;  // already after it
  if (!captured_ && end_.pending()) state_->record_pending(end_);
  const bool captured = captured_ || end_.set_aside();
  if (!captured && end_.retired()) return;  // complete
  // Should the slot go on to a later operation meanwhile, the stream waits
  // for that one too: later than needed, never earlier.
  const cudaError_t rc = state_->cuda().stream_wait_event(
      static_cast<cudaStream_t>(stream.cuda_stream), end_.slot->event);
  // Once its capture is over, an event the capture recorded orders nothing
  // (CUDA answers cudaErrorInvalidValue): the operation runs with the graph.
  if (captured && rc == cudaErrorInvalidValue) return;
  RTD_CUDA_CHECK(state_->cuda(), rc, name_.text() + ": ordering a stream after it");
}

std::optional<Error> NcclWork::error() const {
  done();
  std::lock_guard<std::mutex> held(lock());
  if (!error_) return std::nullopt;
  return *error_;
}

}  // namespace rtd::nccl
