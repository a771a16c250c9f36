// Communicator: collectives over a fixed group of ranks.
//
// Every collective is collective (all ranks of the communicator call it, in the
// same order) and non-blocking: it returns a Work at once. Calls on one
// communicator must come from one thread at a time.
// Streams: a GPU backend orders the operation after the work already queued on
// `stream` (the caller's CUDA stream; {} means the legacy default stream) and
// never blocks the host; CPU backends ignore it. See [Stream order] in work.h.
// In-place: all_reduce with in == out; all_gather with in at out + rank * in.count;
// reduce_scatter with out at in + rank * out.count.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rt_dist/types.h"
#include "rt_dist/work.h"

namespace rtd {

// A reduction over buffers fixed once and reduced many times (a DDP's buckets):
// run(i) reduces buffer i in place on every rank, as all_reduce(buffers[i], op)
// would. Setting it up lets a backend prepare what a single all_reduce cannot:
// on NCCL, ranks on one host with peer access map each other's buffers once
// and move the data with copy engines, leaving the SMs to compute (see
// docs/nccl.md). Every rank calls run() for the same buffers in the same order.
class PersistentAllReduce {
 public:
  virtual ~PersistentAllReduce() = default;
  virtual std::shared_ptr<Work> run(int i, StreamRef stream = {}) = 0;
  // How run() moves data: "copy engines" or "all_reduce".
  virtual std::string method() const = 0;
};

// All-gathers (or reduce-scatters) whose inputs lie in buffers fixed once, the
// `sources`, run many times as a sharded model's steps do: the gathers of
// its parameter shards, the reductions of its gradients. run(in, out) is
// all_gather(in, out) (or reduce_scatter(in, out, op)), with `in` inside one
// source, at the same offset in the same source on every rank; for an
// in-place all-gather (in at out + rank * in.count, out in a source), each
// rank's block of the same out. Outputs may be anywhere. Knowing the sources
// up front lets a backend map them once: on NCCL, ranks on one host with peer
// access read each other's inputs with copy engines (see docs/nccl.md).
// Every rank calls run() for the same places in the same order.
class PersistentShardCollective {
 public:
  virtual ~PersistentShardCollective() = default;
  virtual std::shared_ptr<Work> run(BufferView in, BufferView out, StreamRef stream = {}) = 0;
  // All-gathers only, where gathers_blocks(): each rank's block `rank` of the
  // first source (which holds size() blocks) into outs, which may be anywhere:
  // the block is outs' shares laid end to end (outs[k].count / size()
  // elements each, the first source's dtype), and rank p's share k lands at
  // outs[k] + p * outs[k].count / size(). So a gather buffer whose blocks hold
  // several tensors' shards lands in the tensors themselves, with no copy out
  // of the buffer afterwards. Every rank passes the same counts.
  virtual bool gathers_blocks() const { return false; }
  virtual std::shared_ptr<Work> gather_blocks(const std::vector<BufferView>& outs,
                                              StreamRef stream = {});
  // How run() moves data: "copy engines", "all_gather" or "reduce_scatter".
  virtual std::string method() const = 0;
  // Device memory it holds besides the sources (copy engines: the
  // reduce-scatter's landing slots for its peers' blocks).
  virtual std::size_t scratch_bytes() const { return 0; }
  // Whether this rank's sources are still the memory it was set up on. A
  // source freed and allocated again (by a caching allocator, perhaps at the
  // same address) answers false where peers mapped it (copy engines): the
  // caller must then set up afresh, on every rank. Local: no peer asked.
  virtual bool sources_unchanged() const { return true; }
};

struct PersistentOptions {
  // NCCL, every rank on one host with peer access to the others: move the data
  // with copy engines. Every rank must pass the same value.
  bool copy_engines = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // out = reduce(in over ranks); in.count == out.count.
  virtual std::shared_ptr<Work> all_reduce(BufferView in, BufferView out, ReduceOp op,
                                           StreamRef stream = {}) = 0;
  std::shared_ptr<Work> all_reduce(BufferView buf, ReduceOp op, StreamRef stream = {}) {
    return all_reduce(buf, buf, op, stream);
  }
  // buf on every rank = buf on root.
  virtual std::shared_ptr<Work> broadcast(BufferView buf, int root, StreamRef stream = {}) = 0;
  // out = concat(in of rank 0..size-1); out.count == in.count * size.
  virtual std::shared_ptr<Work> all_gather(BufferView in, BufferView out,
                                           StreamRef stream = {}) = 0;
  // out = slice `rank` of reduce(in); in.count == out.count * size.
  virtual std::shared_ptr<Work> reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                               StreamRef stream = {}) = 0;
  // Block j of in goes to rank j, landing as block `rank` of its out;
  // in.count == out.count, divisible by size. Not in-place.
  virtual std::shared_ptr<Work> all_to_all(BufferView in, BufferView out,
                                           StreamRef stream = {}) = 0;
  virtual std::shared_ptr<Work> barrier(StreamRef stream = {}) = 0;
  // Point-to-point: not collective; the peer posts the matching call with the same tag.
  // recv's peer kAnySource (host memory, Gloo): the first matching message of
  // any other rank; the Work's source() names the sender once done.
  static constexpr int kAnySource = -1;
  virtual std::shared_ptr<Work> send(BufferView buf, int peer, int tag = 0,
                                     StreamRef stream = {}) = 0;
  virtual std::shared_ptr<Work> recv(BufferView buf, int peer, int tag = 0,
                                     StreamRef stream = {}) = 0;

  // Runs body, whose operations on this communicator form one group (NCCL:
  // ncclGroupStart/End; they may then progress together, so paired send/recv
  // cannot deadlock). Returns one Work that completes when all of them have;
  // the Works the operations return inside body must not be waited on there.
  virtual std::shared_ptr<Work> group(const std::function<void()>& body) = 0;

  // Collective over this communicator: ranks with the same color form a new
  // communicator, ordered by (key, rank). color < 0: this rank joins none (nullptr).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Fails every outstanding and later operation, in bounded time. Not collective.
  virtual void abort() = 0;

  // Why this communicator can no longer be used (an asynchronous backend
  // error, an operation past its timeout, an abort), or none while it can. A
  // caller that orders GPU work after ours without waiting on the host (as
  // PyTorch's backends do) asks this to learn of a failure before its next call.
  // Backends whose waits are the host's (Gloo, MPI) answer none: their Works
  // carry the failure.
  virtual std::optional<Error> failure() { return std::nullopt; }

  // Runs listener once, on a thread of the communicator's own, when failure()
  // first has an error to answer: a caller that never waits on the host
  // learns of it without asking. Setting another (or {}, none) returns after
  // a running call of the old one returned, so listener must not set one
  // itself. Backends whose Works carry their failures never run it.
  virtual void on_failure(std::function<void()> listener) { (void)listener; }

  // The stream on which this communicator's GPU operations read and write the
  // caller's buffers ({} for CPU backends): a caller whose memory allocator
  // reuses freed blocks per stream records their use there (torch's
  // Tensor.record_stream), so that no block is reused while an operation runs.
  virtual StreamRef stream() const { return {}; }

  // Device memory the backend moves data to and from directly: on NCCL,
  // allocated with ncclMemAlloc and registered with this communicator
  // (ncclCommRegister), so that transfers between the GPUs of one host skip
  // NCCL's staging copies. nullptr where the backend has no such memory (then
  // allocate as usual). If one rank passes registered memory to a collective,
  // every rank must pass its own registered memory to it. The memory is freed
  // when the last reference goes, which may be after the communicator is
  // destroyed; as with cudaFree, no queued GPU work may still use it then.
  virtual std::shared_ptr<void> allocate_registered(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }

  // Collective: every rank passes buffers of the same counts and dtypes, and
  // the same op and options. The buffers must outlive the result. The default
  // runs all_reduce on each.
  virtual std::unique_ptr<PersistentAllReduce> persistent_all_reduce(
      std::vector<BufferView> buffers, ReduceOp op, PersistentOptions options = {});
  // Collective, as persistent_all_reduce: every rank passes sources of the same
  // counts and dtypes. The defaults run all_gather (reduce_scatter) on each call,
  // after the same checks of where `in` lies.
  virtual std::unique_ptr<PersistentShardCollective> persistent_all_gather(
      std::vector<BufferView> sources, PersistentOptions options = {});
  virtual std::unique_ptr<PersistentShardCollective> persistent_reduce_scatter(
      std::vector<BufferView> sources, ReduceOp op, PersistentOptions options = {});
};

}  // namespace rtd
