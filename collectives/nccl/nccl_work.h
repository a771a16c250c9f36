// NcclWork: the Work of one NCCL operation (or group): the event recorded on
// the communicator's stream after it. Polls the event and the communicator's
// async error; on a host wait that overruns its deadline, aborts the communicator.
#pragma once

#include <memory>
#include <string>

#include "collectives/nccl/comm_state.h"
#include "rt_dist/work.h"

namespace rtd::nccl {

// A Work is made (make_shared) and dropped on every call.
class NcclWork : public Work {
 public:
  // end: from state->record_end (or take_end).
  // name.recorded: the operation's number in the flight recorder (0: not
  // recorded), for the diagnosis of a timeout.
  // ran_on: the stream the operation ran on, when that was the caller's (a
  // wait on it is then already ordered); null otherwise.
  NcclWork(std::shared_ptr<CommState> state, EndTicket end, CallName name,
           cudaStream_t ran_on = nullptr)
      : state_(std::move(state)),
        end_(end),
        name_(std::move(name)),
        ran_on_(ran_on),
        captured_(end.captured) {}
  ~NcclWork() override;
  // [Capture] The operation was captured into a CUDA graph (end.captured,
  // or set_captured for a group, whose Work is made before its end is
  // recorded): done at once, with no error (it runs when the graph does,
  // ordered on the graph's stream); wait(stream) orders a stream after its
  // end event; the slot goes back with the Work.
  void set_captured() { captured_ = true; }

  bool done() const override;
  void wait() override { wait(state_->timeout()); }
  void wait(std::chrono::milliseconds timeout) override;
  void wait(StreamRef stream) override;
  std::optional<Error> error() const override;

 private:
  std::mutex& lock() const { return lock_; }
  void fail(Error error) const { error_ = std::make_unique<const Error>(std::move(error)); }
  std::shared_ptr<CommState> state_;
  EndTicket end_;  // its end event, while the in-flight list has not passed it on
  CallName name_;
  cudaStream_t ran_on_;
  mutable std::mutex lock_;
  // Under lock_:
  mutable std::unique_ptr<const Error> error_;  // set once it failed
  mutable bool complete_ = false;
  bool captured_ = false;
};

}  // namespace rtd::nccl
