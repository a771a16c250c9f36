// GlooCommunicator: the CPU backend. A full TCP mesh set up through our Store;
// operations validated on the caller's thread and run in order on a queue thread.
#pragma once

#include <gloo/context.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/cpu_work.h"
#include "collectives/flight_recorder.h"
#include "collectives/gloo/gloo_ops.h"
#include "collectives/op_queue.h"
#include "rt_dist/communicator.h"
#include "rt_dist/store.h"

namespace rtd::gloo_backend {

struct GlooOptions {
  std::shared_ptr<Store> store;  // already scoped to this communicator
  std::string name = "default";  // in messages
  int rank = 0;
  int size = 1;
  std::string host = "127.0.0.1";  // address this rank listens on
  std::chrono::milliseconds timeout{300'000};
  FlightOptions flight;  // the flight recorder's live warning and dump
};

class GlooCommunicator : public Communicator {
 public:
  // Collective: every rank constructs it with the same store and size; blocks
  // until the mesh is connected or options.timeout passes.
  explicit GlooCommunicator(const GlooOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  using Communicator::all_reduce;  // the in-place form
  std::shared_ptr<Work> all_reduce(BufferView in, BufferView out, ReduceOp op,
                                   StreamRef stream) override;
  std::shared_ptr<Work> broadcast(BufferView buf, int root, StreamRef stream) override;
  std::shared_ptr<Work> all_gather(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                       StreamRef stream) override;
  std::shared_ptr<Work> all_to_all(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> barrier(StreamRef stream) override;
  std::shared_ptr<Work> send(BufferView buf, int peer, int tag, StreamRef stream) override;
  std::shared_ptr<Work> recv(BufferView buf, int peer, int tag, StreamRef stream) override;
  std::shared_ptr<Work> group(const std::function<void()>& body) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void abort() override;

 private:
  // Posts fn to the queue; its Work names the operation and sequence number.
  // call: its number in the flight recorder (0: not recorded, point-to-point).
  // work: created here unless given (a group's point-to-point Work exists before its task).
  template <typename Fn>
  std::shared_ptr<Work> enqueue(const char* op, std::uint32_t tag, std::uint64_t call, Fn&& fn,
                                std::shared_ptr<CpuWork> work = nullptr);
  std::uint64_t record(const CallDescription& call) {
    return recorder_->record(call.op, call.args);
  }
  // A collective's tag: its number (20 bits, wrapping) and 12 bits of what
  // it is (the operation, dtype, byte count, reduction or root), so that
  // ranks whose calls differ exchange no message: each waits for the other
  // until the timeout, which names the call, instead of one reading another's
  // message into a buffer of another size (an uncaught Gloo assertion that
  // ends the process) or reducing values that do not belong together.
  std::uint32_t next_tag(std::string_view op, std::uint64_t a = 0, std::uint64_t b = 0);
  std::shared_ptr<Work> point_to_point(bool is_send, BufferView buf, int peer, int tag);
  std::shared_ptr<Work> post_now(const char* op, const P2POp& p2p);

  // Inside group(): point-to-point operations are posted together, then waited.
  struct PendingP2P {
    bool is_send;
    BufferView buf;
    int peer;
    std::uint32_t tag;
  };
  struct GroupState {
    std::vector<std::shared_ptr<Work>> works;
    std::vector<PendingP2P> p2p;
    std::shared_ptr<CpuWork> p2p_work;  // what every send/recv inside the group returns
  };
  std::unique_ptr<GroupState> group_;
  GlooOptions options_;
  std::uint32_t next_split_ = 0;

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<::gloo::Context> context_;
  std::atomic<bool> aborted_{false};
  // The Works of operations posted and not yet seen done: abort() fails them
  // itself, so that a caller's wait ends even if Gloo never wakes the
  // operation it runs (seen: a ring all-reduce waiting on a lost peer's pair).
  std::mutex pending_mu_;
  std::vector<std::weak_ptr<CpuWork>> pending_;
  void track(const std::shared_ptr<CpuWork>& work);
  // The buffers of sends and receives posted and maybe still waited for:
  // abort() wakes their waits (a receive from any rank waits on no one
  // connection, so failing the connections does not end it).
  struct PostedBuffer {
    std::weak_ptr<::gloo::transport::UnboundBuffer> buf;
    bool is_send;
  };
  std::vector<PostedBuffer> posted_;  // under pending_mu_
  void track_posted(const std::shared_ptr<::gloo::transport::UnboundBuffer>& buf, bool is_send);
  std::uint32_t next_tag_ = 0;
  std::unique_ptr<FlightRecorder> recorder_;
  OpQueue p2p_waits_;  // waits for sends and receives posted on the caller's thread
  OpQueue queue_;      // last: its thread stops before what it uses goes
};

}  // namespace rtd::gloo_backend
