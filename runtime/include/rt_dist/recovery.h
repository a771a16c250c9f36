// Recovery: in-process recovery of a job whose state is replicated (rtd::DDP).
// With dtrun --recovery=in-process, a worker that dies is restarted alone, in
// a new generation, and the others keep their processes and memory:
//
//   rtd::Recovery recovery(*ctx);
//   recovery.enable();
//   if (recovery.replacement()) recovery.sync(state, &done);  // the survivors' state
//   auto ddp = std::make_unique<rtd::DDP>(ctx->comm(), recovery.store(), params, ...);
//   for (step = done + 1; step <= steps; ++step) {
//     try {
//       ... forward, backward, ddp->finish(), the optimizer; done = step ...
//     } catch (const rtd::Error& e) {
//       if (!recovery.recover([&] { ddp.reset(); })) throw;  // not a lost worker
//       recovery.sync(state, &done);  // the step in flight is discarded everywhere
//       ddp = std::make_unique<rtd::DDP>(ctx->comm(), recovery.store(), params, ...);
//       step = done;
//     }
//   }
//
// Every rank ends up with the lowest-ranked survivor's state and step, so
// ranks that finished the failed step and ranks that did not agree again.
//
// A lost peer does not always fail this rank's operations: a killed process
// on the same host leaves NCCL's kernels waiting, and a host cut off leaves
// TCP connections open. From enable() on, a thread of the Recovery waits in
// the store for dtrun's word that the communicator's generation ends (dtrun
// started a replacement, or moves the workers to the next round:
// "recovery/end/<generation>") and then aborts the default communicator
// (Context::abort_comm), so that the step in flight fails and the trainer
// recovers at once instead of after RTD_TIMEOUT_S.
// docs/recovery.md says when a failure costs a restart and when it does not.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rt_dist/context.h"
#include "rt_dist/store.h"
#include "rt_dist/types.h"

namespace rtd {

class Recovery {
 public:
  explicit Recovery(Context& ctx);
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // Says (in the store) that this rank recovers in process. dtrun starts a
  // lost worker again alone only when every rank of the job said so; else
  // the failure ends the round as it would without --recovery=in-process
  // (a trainer that cannot recover would otherwise wait for nothing).
  void enable();

  // Called at the start of a step: true when dtrun moved this worker to a
  // new round though nothing failed (a node joined the job); the trainer
  // then recovers as after a failure (recover(), sync(), its DDP anew).
  bool should_move();

  // This process was started to replace a lost one, or into a later round
  // of the job (a newcomer node's worker): it calls sync() before its first
  // step.
  bool replacement() const { return replacement_; }
  int generation() const;
  // The job's store under this generation's prefix: what is built on the
  // rebuilt communicator (rtd::DDP) keys its checks there, so that a
  // survivor's second DDP and a replacement's first meet.
  Store& store() { return *store_; }

  // After an operation of a step threw: aborts the default communicator and
  // closes it once its operations have ended (peers blocked on this rank
  // fail at once), calls `release` (destroy what holds the communicator: the
  // DDP), then waits up to RTD_RECOVERY_WAIT_S for dtrun to start a
  // replacement (a new generation) and builds the communicator with it; or,
  // where a node was lost, for dtrun to move this worker to the next round
  // (then ctx.world() holds its new rank and world size: the trainer
  // re-splits its data).
  // Returns false, the communicator closed, when recovery is off or no
  // replacement came: the failure is the job's, and the caller rethrows it.
  bool recover(const std::function<void()>& release);

  // The store key dtrun writes when generation `generation` of a round ends
  // (under the round's prefix): what the watch waits for.
  static std::string end_key(int generation);

  // Collective, after recover() (or in a replacement, before its first
  // step): every rank gets the lowest-ranked survivor's `state` (the
  // parameters, the optimizer's moments: the same buffers on every rank) and
  // *step (the last step it completed). Returns that rank. Throws
  // rtd::Error(kInvalidArgument) when no rank of the generation holds state.
  int sync(const std::vector<BufferView>& state, std::int64_t* step);

 private:
  // The watch (above): armed for the current generation while it runs.
  void arm();
  void disarm();
  void watch();

  Context& ctx_;
  bool replacement_ = false;
  bool has_state_ = true;  // a replacement has none until its first sync()
  bool enabled_ = false;
  std::shared_ptr<Store> store_;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::uint64_t epoch_ = 0;  // raised by every arm() and disarm()
  bool armed_ = false;
  bool stopping_ = false;
  Store* watched_store_ = nullptr;  // the round's (the context keeps it alive)
  int watched_generation_ = 0;
  int watched_round_ = 0;
  std::thread watcher_;
};

}  // namespace rtd
