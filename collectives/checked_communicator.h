// CheckedCommunicator: a debugging layer over any backend that catches ranks
// calling different collectives at call time, before anything is launched,
// instead of at the timeout (RTD_CHECK_COLLECTIVES=1).
//
// Before each collective, every rank writes what it is calling (the
// operation, dtype x count, reduce op or root) to the store under the call's
// number and reads every other rank's: a difference is rtd::Error
// (kInvalidArgument) on every rank, naming each rank's call; a rank that never
// makes the call is a kTimeout naming it. It costs a store round trip per rank
// per collective: for finding a bug, not for training runs. Point-to-point
// operations pass through unchecked.
#pragma once

#include <memory>
#include <string>

#include "collectives/flight_recorder.h"
#include "rt_dist/communicator.h"
#include "rt_dist/store.h"

namespace rtd {

class CheckedCommunicator : public Communicator {
 public:
  // store: scoped to this communicator; timeout: how long to wait for a peer's call.
  CheckedCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<Store> store,
                      std::chrono::milliseconds timeout);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }

  using Communicator::all_reduce;
  std::shared_ptr<Work> all_reduce(BufferView in, BufferView out, ReduceOp op,
                                   StreamRef stream) override;
  std::shared_ptr<Work> broadcast(BufferView buf, int root, StreamRef stream) override;
  std::shared_ptr<Work> all_gather(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                       StreamRef stream) override;
  std::shared_ptr<Work> all_to_all(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> barrier(StreamRef stream) override;
  std::shared_ptr<Work> send(BufferView buf, int peer, int tag, StreamRef stream) override {
    return inner_->send(buf, peer, tag, stream);
  }
  std::shared_ptr<Work> recv(BufferView buf, int peer, int tag, StreamRef stream) override {
    return inner_->recv(buf, peer, tag, stream);
  }
  std::shared_ptr<Work> group(const std::function<void()>& body) override {
    return inner_->group(body);
  }
  std::unique_ptr<Communicator> split(int color, int key) override;
  void abort() override { inner_->abort(); }
  std::shared_ptr<void> allocate_registered(std::size_t bytes) override {
    return inner_->allocate_registered(bytes);
  }
  std::unique_ptr<PersistentAllReduce> persistent_all_reduce(std::vector<BufferView> buffers,
                                                             ReduceOp op,
                                                             PersistentOptions options) override;
  std::unique_ptr<PersistentShardCollective> persistent_all_gather(
      std::vector<BufferView> sources, PersistentOptions options) override;
  std::unique_ptr<PersistentShardCollective> persistent_reduce_scatter(
      std::vector<BufferView> sources, ReduceOp op, PersistentOptions options) override;

 private:
  // Throws unless every rank calls the same (op, args) as this rank's next collective.
  void check(const CallDescription& what);
  void check(const char* op, const std::string& args);

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<Store> store_;
  std::chrono::milliseconds timeout_;
  std::uint64_t seq_ = 0;
  int splits_ = 0;
};

}  // namespace rtd
