// StagedCollectives: all_reduce(), all_gather() and reduce_scatter() of
// buffers that were never set up, by copy engines
// (NcclSettings::staged_copy_engines). A persistent copy-engine collective
// needs sources its peers mapped once; a caller such as PyTorch's DDP or
// FSDP2 hands a new pointer whenever it likes. So each (operation, count,
// dtype, op) gets a staging buffer of its own, mapped by the peers at its
// first call, and each call copies its input in and runs the persistent
// collective out of it, on the communicator's stream (so calls of one size
// take their turns):
//   all_reduce:     copy in, reduce in place by copy engines, copy out;
//   all_gather:     copy the shard in; each rank pulls its peers' shards
//                   straight into its own output (only the shard is copied);
//   reduce_scatter: copy the whole input in; each rank pulls its block of its
//                   peers' inputs and adds them into its own output.
//
// Every rank makes the same calls in the same order, so every rank reaches a
// size's first call, and the set-up it makes collectively, at the same call;
// and the same rules (the smallest size, the memory cap, a refusal) give the
// same answer everywhere.
//
// Each slot is a site whose calls go by copy engines or by NCCL's kernels as
// its MethodChoice says (collectives/method_choice.h): measured by default,
// fixed where RTD_CE_SITES says so (a site fixed on kernels gets no slot).
// The measurement's agreement is an NCCL all-reduce the communicator runs
// (Agree), at the same call of the site on every rank.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/device_memory.h"
#include "collectives/method_choice.h"
#include "collectives/nccl/site_timing.h"
#include "rt_dist/communicator.h"

namespace rtd::nccl {

class StagedCollectives {
 public:
  enum class Kind { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2 };
  // Calls that move fewer bytes go to NCCL (its kernels are quicker there);
  // the staging buffers together hold at most max_bytes.
  static constexpr std::size_t kMinBytes = std::size_t(1) << 20;
  static constexpr std::size_t kMaxBytes = std::size_t(1) << 30;

  // The persistent copy-engine collective of one staging buffer, or nullptr
  // (then, with *why, no call of that kind is staged on this communicator).
  using MakeReduce =
      std::function<std::unique_ptr<PersistentAllReduce>(BufferView, ReduceOp, std::string*)>;
  using MakeShard = std::function<std::unique_ptr<PersistentShardCollective>(
      BufferView, bool gather, ReduceOp, std::string*)>;
  StagedCollectives(int device, MakeReduce reduce, MakeShard shard,
                    std::vector<SiteRuleEntry> rules, MethodChoice::Options choice)
      : device_(device),
        make_reduce_(std::move(reduce)),
        make_shard_(std::move(shard)),
        rules_(std::move(rules)),
        choice_(choice) {}

  struct Slot {
    Kind kind;
    DeviceBuffer buffer;
    BufferView view;
    std::unique_ptr<PersistentAllReduce> reduce;       // kAllReduce
    std::unique_ptr<PersistentShardCollective> shard;  // the others
    std::string site;                                  // for the log: "all_reduce of N x dtype"
    MethodChoice choice;
    std::unique_ptr<TrialEvents> trials;  // while measuring
    int timing = -1;                      // the call under way: its trial index, or -1
  };
  // The staged collective for this call (in: the caller's input, moved bytes:
  // what the operation transfers), set up at its first call; nullptr when
  // this call goes to NCCL.
  Slot* slot_for(Kind kind, const BufferView& in, ReduceOp op, std::size_t moved_bytes);

  // Runs the staged collective of `in` into `out` on stream s (the
  // communicator's).
  static void run(Slot& slot, const BufferView& in, const BufferView& out, StreamRef s);

  // The method of the slot's next call; at the end of a measurement, the
  // timings summed over the ranks by agree() decide it (then logged).
  using Agree = std::function<void(MethodChoice::Sums&)>;
  static Method method_for_call(Slot& slot, const Agree& agree);
  // Around the call on the communicator's stream: timed when it is a trial.
  static void begin_call(Slot& slot, StreamRef s);
  static void end_call(Slot& slot, StreamRef s);

 private:
  int device_;
  MakeReduce make_reduce_;
  MakeShard make_shard_;
  std::vector<SiteRuleEntry> rules_;
  MethodChoice::Options choice_;
  bool refused_[3] = {false, false, false};  // by Kind
  std::size_t bytes_ = 0;
  std::map<std::tuple<int, std::size_t, int, int>, std::unique_ptr<Slot>> slots_;
};

}  // namespace rtd::nccl
