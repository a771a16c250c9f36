// CopyEngineShardCollective: a PersistentShardCollective (all-gather or
// reduce-scatter) for ranks on one host whose GPUs reach each other. Each rank
// pulls what it needs out of its peers' sources with copy engines; the only SM
// work is the reduce-scatter's addition, so the GEMMs of a sharded model's
// forward and backward keep their SMs while its shards move.
//
// [Protocol] Call e of run(in, out), on the collective's own stream, ordered
// after the caller's:
//   1. tells every peer "my input for call e is final" (flag kReady);
//   2. after each peer's kReady, pulls from that peer's input: all-gather, the
//      whole of it into block p of out; reduce-scatter, its block `rank` into
//      out itself (the first peer in rotation) or a scratch slot (the others,
//      and every peer in place);
//   3. all-gather: copies its own input into its block of out (unless in
//      place); reduce-scatter: out = scale * (out + its own block + the slots);
//   4. tells every peer "done reading you" (kDone) and waits for every peer's
//      kDone: once the Work is done no peer reads this rank's input any more,
//      and the caller may write it.
// Calls of one collective follow each other on its stream; an all-gather and
// a reduce-scatter (two collectives) may overlap.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "collectives/nccl/ce_peers.h"
#include "rt_dist/communicator.h"

namespace rtd::nccl {

class CopyEngineShardCollective : public PersistentShardCollective {
 public:
  // Collective. gather: all-gather, else reduce-scatter with setup.op (sum or
  // average, float32, bfloat16 or float16 sources). nullptr on every rank, with *why,
  // when any rank cannot take part; then the caller falls back to NCCL.
  static std::unique_ptr<CopyEngineShardCollective> create(const CeSetup& setup, bool gather,
                                                           std::string* why);

  std::shared_ptr<Work> run(BufferView in, BufferView out, StreamRef stream) override;
  // The same protocol, each peer's block of its first source pulled share by
  // share into outs (its own block copied locally).
  bool gathers_blocks() const override { return gather_; }
  std::shared_ptr<Work> gather_blocks(const std::vector<BufferView>& outs,
                                      StreamRef stream) override;
  std::string method() const override { return "copy engines"; }
  bool sources_unchanged() const override { return peers_->buffers_unchanged(); }
  std::size_t scratch_bytes() const override {
    return std::max(0, setup_.size - 2) * slot_bytes_ +
           (in_place_scratch_ ? (setup_.size - 1) * slot_bytes_ : 0);
  }
  ~CopyEngineShardCollective() override;

 private:
  char* in_place_scratch(CeCall& call);  // allocated at the first in-place reduce-scatter

  CopyEngineShardCollective(const CeSetup& setup, bool gather, std::size_t slot_bytes,
                            std::shared_ptr<CePeers> peers);

  CeSetup setup_;
  bool gather_;
  std::size_t slot_bytes_;  // reduce-scatter: bytes per scratch slot
  std::shared_ptr<CePeers> peers_;
  unsigned epoch_ = 0;  // calls so far
  void* in_place_scratch_ = nullptr;
};

}  // namespace rtd::nccl
