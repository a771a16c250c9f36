// CopyEngineAllReduce: a PersistentAllReduce for ranks on one host whose GPUs
// reach each other (NVLink or PCIe peer access). Data moves by copy engines;
// the only SM work is one addition kernel per buffer, so products running
// beside it keep their SMs (NCCL's kernels hold SMs for the whole transfer).
//
// [Protocol] For buffer i, rank r owns chunk r of `size` near-equal chunks.
// On the reducer's own stream, ordered after the caller's, run(i):
//   1. tells every peer "my buffer i is final for epoch e" (a flag in its memory);
//   2. waits for every peer's flag; pulls each peer's chunk r into scratch;
//   3. adds them into its own chunk r;
//   4. pushes the reduced chunk r into every peer's buffer (only r read that
//      part of a peer's buffer, in step 2), then tells the peers "reduced";
//   5. waits for every peer's "reduced": its buffer is then whole, and no
//      peer reads it any more, so the caller may write it once the Work is done.
// The copies of steps 2 and 4 take the peers in rotation (rank + 1, rank + 2,
// ...) on one stream: while every rank does the same, each GPU is read (or
// written) by one peer at a time, which on 4×H200 moved 1.7× the bytes per
// second of all peers at once (411ccc3:docs/benchmarks.md). `copy_streams` > 1
// spreads them over that many streams (forked from and joined to the main
// stream), for topologies where all-to-all traffic does not contend.
// Flags, mappings and the copy rotation are CePeers' and CeCall's (ce_peers.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/nccl/ce_peers.h"
#include "rt_dist/communicator.h"

namespace rtd::nccl {

class CopyEngineAllReduce : public PersistentAllReduce {
 public:
  // Collective. nullptr on every rank, with *why, when any rank cannot take
  // part (ranks on several hosts, no peer access, an op other than sum or
  // average, a dtype other than float32, bfloat16 or float16, memory that cannot be
  // shared, the driver's stream memory operations missing); then the caller
  // falls back to all_reduce on every rank alike.
  static std::unique_ptr<CopyEngineAllReduce> create(const CeSetup& setup, std::string* why);
  ~CopyEngineAllReduce() override;

  std::shared_ptr<Work> run(int i, StreamRef stream) override;
  std::string method() const override { return "copy engines"; }

 private:
  CopyEngineAllReduce(const CeSetup& setup, std::shared_ptr<CePeers> peers);

  CeSetup setup_;
  std::shared_ptr<CePeers> peers_;
  std::vector<unsigned> epoch_;  // per buffer: runs so far
};

}  // namespace rtd::nccl
