// What the copy-engine collectives (ce_all_reduce, ce_shard_collectives) share:
//  - CePeers: set up through the store (are all ranks on one host? can each
//    share the buffers its peers will read?), every peer's buffers and flags
//    mapped here, a scratch area, and streams of their own;
//  - CeCall: the steps of one call on those streams: order after the caller,
//    raise a flag in every peer, wait for a peer's flag, copy with every peer
//    in rotation, and end in a Work.
// Flags are 32-bit epochs: flag (slot, from) in rank r's memory is written by
// rank `from` with stream memory operations and waited on by r's stream, so
// neither the host nor any SM waits. An abort of the communicator raises every
// flag, which releases every wait.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/nccl/comm_state.h"
#include "collectives/nccl/device_spans.h"
#include "rt_dist/communicator.h"
#include "rt_dist/store.h"

namespace rtd::nccl {

struct CeSetup {
  std::shared_ptr<CommState> state;
  Store* store = nullptr;  // scoped to this collective (every rank the same prefix)
  int rank = 0;
  int size = 1;
  int device = 0;
  std::vector<BufferView> buffers;  // what peers read (and, for the all-reduce, write)
  ReduceOp op = ReduceOp::kSum;
  std::chrono::milliseconds timeout{300'000};
  int reduce_blocks = -1;  // the addition's grid; -1: enough for the chunk
  // Streams the copies are spread over; 1 (or less): one, peers in rotation.
  // With more streams than peers each copy is split in equal parts.
  int copy_streams = 1;
};

class CePeers {
 public:
  // Collective. nullptr on every rank, with *why, when any rank cannot take
  // part: ranks on several hosts, `refusal` non-empty on some rank (its own
  // reason), a buffer not on the GPU or whose memory cannot be shared, ranks
  // with different buffers, the driver's stream memory operations missing.
  // flag_slots flags per peer; scratch_bytes of device memory for the caller.
  static std::shared_ptr<CePeers> create(const CeSetup& setup, const std::string& refusal,
                                         int flag_slots, std::size_t scratch_bytes,
                                         std::string* why);
  ~CePeers();
  CePeers(const CePeers&) = delete;
  CePeers& operator=(const CePeers&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  char* scratch() const { return scratch_; }
  // Buffer i of rank r, mapped here (r != rank()).
  char* peer_buffer(int r, int i) const { return peer_buffers_[r][i]; }
  // Whether this rank's buffers are still the allocations the peers mapped
  // (false: one was freed and its place allocated again, even at the same
  // address; the peers' mappings then hold the old memory).
  bool buffers_unchanged() const;

 private:
  friend class CeCall;
  CePeers() = default;
  void release_waits();
  // Waits (up to the timeout) for every stream's queued copies; the first error.
  cudaError_t drain_all();

  int device_ = 0, rank_ = 0, size_ = 1, flag_slots_ = 0;
  std::chrono::milliseconds timeout_{300'000};
  cudaStream_t stream_ = nullptr;          // highest priority
  cudaStream_t release_stream_ = nullptr;  // for the abort hook's flag raise
  cudaEvent_t start_ = nullptr;            // recorded on the caller's stream
  cudaEvent_t fork_ = nullptr;             // recorded on stream_, awaited by the copy streams
  std::vector<cudaStream_t> copies_;       // the copy streams (none: stream_ copies)
  std::vector<cudaEvent_t> joins_;         // per copy stream, awaited by stream_
  unsigned* flags_ = nullptr;              // [slot][from rank]
  std::size_t flag_count_ = 0;
  char* scratch_ = nullptr;
  std::vector<char*> peer_flags_;                 // per rank (own: nullptr), mapped here
  std::vector<std::vector<char*>> peer_buffers_;  // [rank][buffer], mapped here
  std::vector<void*> opened_;                     // IPC mappings to close
  std::unique_ptr<DeviceSpans> spans_;            // with the trace on: each copy and addition
  // This rank's buffers and their allocations' ids when the peers mapped them.
  std::vector<std::pair<const void*, unsigned long long>> own_ids_;
};

// One call of a copy-engine collective: recorded in the flight recorder as
// `op` with `args`, named "<name> #<number><detail> on rank R" in errors, and
// refused when the communicator has failed; then ++epoch is its flags' value.
// Every step is enqueued on the collective's stream (or its copy streams);
// nothing blocks the host. With the trace on, each copy and addition is a span
// of it, on the row of the stream it ran on.
class CeCall {
 public:
  CeCall(CePeers& peers, std::shared_ptr<CommState> state, const std::string& op, std::string args,
         const std::string& name, const std::string& detail, unsigned& epoch);

  void start_after(StreamRef caller);
  void tell_peers(int slot);                           // flag (slot, me) := epoch in every peer
  void wait_for(int slot, int peer, cudaStream_t on);  // until flag (slot, peer) reaches epoch
  void wait_for_all(int slot);                         // every peer, on the main stream
  // bytes(p) bytes (or `bytes`, the same for all) from src(p) to dst(p) for
  // every peer p, in rotation (rank + 1, rank + 2, ...), each after flag
  // (wait_slot, p) unless wait_slot < 0. While
  // every rank does the same, each GPU is read (or written) by one peer at a
  // time, which on 4xH200 moved 1.7x the bytes of all peers at once.
  using Where = std::function<char*(int peer)>;
  using Bytes = std::function<std::size_t(int peer)>;
  void copy_with_peers(int wait_slot, const Where& dst, const Where& src, const Bytes& bytes,
                       const char* step);
  void copy_with_peers(int wait_slot, const Where& dst, const Where& src, std::size_t bytes,
                       const char* step) {
    copy_with_peers(
        wait_slot, dst, src, [bytes](int) { return bytes; }, step);
  }
  // A copy within this GPU, on the main stream.
  void copy_local(void* dst, const void* src, std::size_t bytes, const char* step);
  // The work enqueued on the main stream between mark() and span() is one
  // span of the trace (the addition kernel), when the trace is on.
  DeviceSpans::Mark mark();
  void span(const DeviceSpans::Mark& from, const char* name, std::size_t bytes);
  void check_launch(const char* step);                  // after a kernel launched on stream()
  void check_result(cudaError_t rc, const char* step);  // throws when rc is an error
  // The Work of the call, once every step is enqueued.
  std::shared_ptr<Work> finish();

 private:
  CePeers& peers_;
  std::shared_ptr<CommState> state_;
  std::uint64_t number_;
  UnlaunchedCall unlaunched_;
  std::string what_;
  unsigned epoch_ = 0;
};

// Why this rank cannot reduce setup's buffers with copy engines (empty: it can):
// the addition does sum or average of float32, bfloat16 or float16.
std::string reduce_refusal(const CeSetup& setup);

}  // namespace rtd::nccl
