// CopyEnginePushCollective: an all-reduce or a reduce-scatter by copy engines
// of buffers that the peers never mapped, such as the ones PyTorch's DDP and
// FSDP2 hand the rtd backend (StagedCollectives' calls). The peers map, once,
// only a landing area of this rank's own; every copy then has the caller's
// buffer at its local end and a landing area at its peer's end, so no call
// needs to know where a peer's buffer lies, and the caller's buffer is never
// copied whole (the persistent collectives, which read and write the peers'
// buffers themselves, needed the input copied into a mapped buffer and, for
// the all-reduce, the result copied out again).
//
// [Protocol] Call e of run(in, out), on the collective's own stream, ordered
// after the caller's. All-reduce (rank r owns chunk r, ce_chunks.h):
//   1. pushes chunk p of `in` into peer p's landing slot for r, for every
//      peer p, then tells every peer "pushed" (kPushed);
//   2. after every peer's kPushed: out's chunk r = scale * (in's chunk r +
//      the slots), the one kernel; a copy of it into its own result slot,
//      then tells every peer "reduced" (kReduced);
//   3. after each peer's kReduced, pulls its result slot into chunk p of out;
//   4. tells every peer "done" (kDone) and waits for every peer's kDone.
// Why call e + 1 may write what call e used: a peer pushes into this rank's
// slots only after it saw this rank's kReduced of call e, which follows the
// addition that read them; this rank rewrites its result slot only after every
// peer's kPushed of call e + 1, which follows that peer's pulls of call e.
// Step 4 is for the end: once a call's Work is done no peer reads this rank's
// memory any more, so that the collective (and its landing area) may go at
// any time after, on each rank by itself.
// Reduce-scatter: 1. as above with block p of `in`, into the slots of call
// e's parity (two sets: the pushes of call e + 1 may come before this rank's
// addition of call e, and those of e + 2 follow this rank's kPushed of e + 1,
// which follows that addition); 2. out = scale * (in's block r + the slots).
// One round of flags a call: no peer ever reads this rank's memory.
// Nothing waits on the host.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "collectives/device_memory.h"
#include "collectives/nccl/ce_peers.h"
#include "rt_dist/communicator.h"

namespace rtd::nccl {

class CopyEnginePushCollective {
 public:
  enum class Kind { kAllReduce, kReduceScatter };
  // Collective: the landing area for calls whose input has `count` elements
  // of `dtype` (setup.buffers is ignored: the landing area is the one buffer
  // the peers map). nullptr on every rank, with *why, when any rank cannot
  // take part (see CePeers::create; the op must be sum or average of float32,
  // bfloat16 or float16).
  static std::unique_ptr<CopyEnginePushCollective> create(CeSetup setup, Kind kind,
                                                          std::size_t count, DType dtype,
                                                          std::string* why);
  ~CopyEnginePushCollective();

  // in: `count` elements; out: as many (all-reduce; may be in) or count / size
  // (reduce-scatter), anywhere on this rank's GPU.
  std::shared_ptr<Work> run(const BufferView& in, const BufferView& out, StreamRef caller);
  // The device memory it holds (its landing area) for calls of `count` x
  // `dtype` on `ranks` ranks.
  static std::size_t landing_bytes(Kind kind, std::size_t count, DType dtype, int ranks);

 private:
  CopyEnginePushCollective(CeSetup setup, Kind kind, std::size_t count, DType dtype,
                           std::size_t slot_bytes, DeviceBuffer landing,
                           std::shared_ptr<CePeers> peers);
  std::shared_ptr<Work> all_reduce(const BufferView& in, const BufferView& out, StreamRef caller);
  std::shared_ptr<Work> reduce_scatter(const BufferView& in, const BufferView& out,
                                       StreamRef caller);
  // Where peer p's landing slot for this rank lies (of the given half of the
  // reduce-scatter's slots), mapped here.
  char* slot_in_peer(int p, int half) const;

  CeSetup setup_;
  Kind kind_;
  std::size_t count_;
  DType dtype_;
  std::size_t slot_bytes_;  // a multiple of 16
  // All-reduce: size - 1 slots (one per peer), then the result slot;
  // reduce-scatter: 2 x (size - 1) slots.
  DeviceBuffer landing_;
  std::shared_ptr<CePeers> peers_;
  unsigned epoch_ = 0;  // calls so far
};

}  // namespace rtd::nccl
