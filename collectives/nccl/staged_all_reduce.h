// StagedAllReduces: all_reduce() of buffers that were never set up, by copy
// engines (NcclSettings::staged_copy_engines). A persistent copy-engine
// all-reduce needs buffers its peers mapped once; a caller such as PyTorch's
// DDP hands a new pointer whenever it likes. So each (count, dtype, op) gets
// a staging buffer of its own, mapped by the peers at its first call: the
// input is copied in, reduced there by copy engines, copied out, all on the
// communicator's stream (so calls of one size take their turns).
//
// Every rank makes the same calls in the same order, so every rank reaches a
// size's first call, and the set-up it makes collectively, at the same call;
// and the same rules (the smallest size, the memory cap, a refusal) give the
// same answer everywhere.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "collectives/device_memory.h"
#include "rt_dist/communicator.h"

namespace rtd::nccl {

class StagedAllReduces {
 public:
  // Calls below min_bytes go to NCCL (its kernels are quicker there); the
  // staging buffers together hold at most max_bytes.
  static constexpr std::size_t kMinBytes = std::size_t(1) << 20;
  static constexpr std::size_t kMaxBytes = std::size_t(1) << 30;

  // make(staging, op): the persistent copy-engine all-reduce of that one
  // buffer, or nullptr (then, with *why, no call of this communicator is staged).
  using Make =
      std::function<std::unique_ptr<PersistentAllReduce>(BufferView, ReduceOp, std::string*)>;
  StagedAllReduces(int device, Make make) : device_(device), make_(std::move(make)) {}

  // The staged reduction for in's (count, dtype) and op, set up at its first
  // call; nullptr when this call goes to NCCL.
  struct Slot {
    DeviceBuffer buffer;
    BufferView view;
    std::unique_ptr<PersistentAllReduce> reduce;
  };
  Slot* slot_for(const BufferView& in, ReduceOp op);

  // Runs the staged reduction of `in` into `out` on stream s (the
  // communicator's): copy in, reduce by copy engines, copy out.
  static void run(Slot& slot, const BufferView& in, const BufferView& out, StreamRef s);

 private:
  int device_;
  Make make_;
  bool refused_ = false;
  std::size_t bytes_ = 0;
  std::map<std::tuple<std::size_t, int, int>, std::unique_ptr<Slot>> slots_;
};

}  // namespace rtd::nccl
