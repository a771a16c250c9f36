// NcclWork: the Work of one NCCL operation (or group): the event recorded on
// the communicator's stream after it. Polls the event and the communicator's
// async error; on a host wait that overruns its deadline, aborts the communicator.
#pragma once

#include <memory>
#include <string>

#include "collectives/nccl/comm_state.h"
#include "rt_dist/work.h"

namespace rtd::nccl {

// A Work is made and dropped on every call: with its shared_ptr's counts, in
// a block of RecycledBlocks, two cache lines (its lock is the state's, by
// its address).
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
  ~NcclWork() override;  // on the data path (hot_path.h)
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
#ifdef RTD_AB_WITHOUT_WORK_LOCK
  mutable std::mutex own_lock_;
  std::mutex& lock() const { return own_lock_; }
#else
  std::mutex& lock() const { return state_->work_lock(this); }
#endif
  void fail(Error error) const { error_ = std::make_unique<const Error>(std::move(error)); }
  std::shared_ptr<CommState> state_;
  EndTicket end_;  // its end event, while the in-flight list has not passed it on
  CallName name_;
  cudaStream_t ran_on_;
  // Under state_->work_lock(this):
  mutable std::unique_ptr<const Error> error_;  // set once it failed
  mutable bool complete_ = false;
  bool captured_ = false;
};

}  // namespace rtd::nccl
