// PendingAborts: a thread per abort, and the wait for them at the exit.
#include "collectives/nccl/pending_aborts.h"

#include <cstdlib>
#include <thread>

namespace rtd::nccl {
namespace {
// How long the exit waits for aborts still running (NCCL's can hang:
// NVIDIA/nccl#1013); the same bound a caller waited before.
constexpr std::chrono::seconds kExitBound{10};
}  // namespace

PendingAborts& PendingAborts::instance() {
  static PendingAborts* aborts = [] {
    auto* made = new PendingAborts();
    std::atexit([] { instance().wait_all(kExitBound); });
    return made;
  }();
  return *aborts;
}

PendingAborts::PendingAborts() : state_(std::make_shared<State>()) {}

void PendingAborts::start(std::function<void()> abort) {
  std::shared_ptr<State> state = state_;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    ++state->running;
  }
  std::thread([state, abort = std::move(abort)] {
    abort();
    {
      std::lock_guard<std::mutex> lock(state->mu);
      --state->running;
    }
    state->done.notify_all();
  }).detach();
}

bool PendingAborts::wait_all(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->done.wait_for(lock, bound, [&] { return state_->running == 0; });
}

}  // namespace rtd::nccl
