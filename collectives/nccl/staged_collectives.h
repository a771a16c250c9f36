// StagedCollectives: all_reduce(), all_gather() and reduce_scatter() of
// buffers that were never set up, by copy engines
// (NcclSettings::staged_copy_engines). A caller such as PyTorch's DDP or
// FSDP2 hands a new pointer whenever it likes, so the peers cannot map the
// caller's buffers once; each (operation, count, dtype, op) instead gets
// memory of its own that the peers map at its first call, and each call runs
// on the communicator's stream (so calls of one size take their turns):
//   all_reduce, reduce_scatter: each rank pushes its peers' chunks of its
//                   input into their landing slots, adds what landed in its
//                   own into its output, and (all-reduce) the peers pull the
//                   result (ce_push_collective.h): the input is never copied
//                   whole;
//   all_gather:     copy the shard into a staging buffer; each rank pulls its
//                   peers' shards straight into its own output (only the
//                   shard is copied).
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
#include "collectives/nccl/ce_push_collective.h"
#include "collectives/nccl/site_timing.h"
#include "rt_dist/communicator.h"

namespace rtd::nccl {

class StagedCollectives {
 public:
  enum class Kind { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2 };
  // Calls that move fewer bytes go to NCCL (its kernels are quicker there);
  // the sites' own memory (landing areas, staging buffers) is at most kMaxBytes.
  static constexpr std::size_t kMinBytes = std::size_t(1) << 20;
  static constexpr std::size_t kMaxBytes = std::size_t(1) << 30;

  // The copy-engine collective of one site, or nullptr (then, with *why, no
  // call of that kind is staged on this communicator): the all-reduce or
  // reduce-scatter of inputs shaped like `shape`, or the all-gather of one
  // staging buffer.
  using MakePush = std::function<std::unique_ptr<CopyEnginePushCollective>(
      CopyEnginePushCollective::Kind, const BufferView& shape, ReduceOp, std::string*)>;
  using MakeGather =
      std::function<std::unique_ptr<PersistentShardCollective>(BufferView, std::string*)>;
  StagedCollectives(int device, int ranks, MakePush push, MakeGather gather,
                    std::vector<SiteRuleEntry> rules, MethodChoice::Options choice)
      : device_(device),
        ranks_(ranks),
        make_push_(std::move(push)),
        make_gather_(std::move(gather)),
        rules_(std::move(rules)),
        choice_(choice) {}

  struct Slot {
    Kind kind;
    std::unique_ptr<CopyEnginePushCollective> push;     // kAllReduce, kReduceScatter
    std::unique_ptr<DeviceBuffer> staging;              // kAllGather: the shard, copied in
    BufferView view;                                    // of staging
    std::unique_ptr<PersistentShardCollective> gather;  // kAllGather, out of staging
    std::string site;                                   // for the log: "all_reduce of N x dtype"
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
  int ranks_;
  MakePush make_push_;
  MakeGather make_gather_;
  std::vector<SiteRuleEntry> rules_;
  MethodChoice::Options choice_;
  bool refused_[3] = {false, false, false};  // by Kind
  std::size_t bytes_ = 0;
  std::map<std::tuple<int, std::size_t, int, int>, std::unique_ptr<Slot>> slots_;
};

}  // namespace rtd::nccl
