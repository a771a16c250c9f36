// The default persistent collectives: one plain collective per run.
#include <cstring>

#include "collectives/validate.h"
#include "rt_dist/communicator.h"
#include "rt_dist/error.h"

namespace rtd {
namespace {

class AllReduceEach : public PersistentAllReduce {
 public:
  AllReduceEach(Communicator& comm, std::vector<BufferView> buffers, ReduceOp op)
      : comm_(comm), buffers_(std::move(buffers)), op_(op) {}

  std::shared_ptr<Work> run(int i, StreamRef stream) override {
    if (i < 0 || i >= static_cast<int>(buffers_.size())) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "PersistentAllReduce::run: no buffer " + std::to_string(i));
    }
    return comm_.all_reduce(buffers_[i], op_, stream);
  }
  std::string method() const override { return "all_reduce"; }

 private:
  Communicator& comm_;
  std::vector<BufferView> buffers_;
  ReduceOp op_;
};

// Gathers (gather) or reduce-scatters (!gather) each call, after checking
// that its input lies in a source, as the copy-engine version requires.
class ShardCollectiveEach : public PersistentShardCollective {
 public:
  ShardCollectiveEach(Communicator& comm, std::vector<BufferView> sources, bool gather, ReduceOp op)
      : comm_(comm), sources_(std::move(sources)), gather_(gather), op_(op) {}

  std::shared_ptr<Work> run(BufferView in, BufferView out, StreamRef stream) override {
    validate::shard_source(gather_ ? "persistent all_gather" : "persistent reduce_scatter", gather_,
                           sources_, in, out, comm_.rank(), comm_.size());
    return gather_ ? comm_.all_gather(in, out, stream) : comm_.reduce_scatter(in, out, op_, stream);
  }
  // On host memory: the first source gathered in place, then each share
  // copied out of it (the copy the copy engines spare a GPU's buffers).
  bool gathers_blocks() const override {
    return gather_ && !sources_.empty() && sources_[0].device == DeviceType::kCpu;
  }
  std::shared_ptr<Work> gather_blocks(const std::vector<BufferView>& outs,
                                      StreamRef stream) override {
    if (!gathers_blocks()) return PersistentShardCollective::gather_blocks(outs, stream);
    const BufferView& source = sources_[0];
    const int n = comm_.size(), me = comm_.rank();
    validate::gather_blocks(source, outs, n, DeviceType::kCpu);
    const std::size_t block = source.count / n, item = dtype_size(source.dtype);
    BufferView own = source;
    own.data = static_cast<char*>(source.data) + me * block * item;
    own.count = block;
    auto work = comm_.all_gather(own, source, stream);
    work->wait();
    std::size_t offset = 0;  // bytes into a block
    for (const BufferView& out : outs) {
      const std::size_t share = out.count / n * item;
      for (int p = 0; p < n; ++p) {
        std::memcpy(static_cast<char*>(out.data) + p * share,
                    static_cast<const char*>(source.data) + p * block * item + offset, share);
      }
      offset += share;
    }
    return work;
  }
  std::string method() const override { return gather_ ? "all_gather" : "reduce_scatter"; }

 private:
  Communicator& comm_;
  std::vector<BufferView> sources_;
  bool gather_;
  ReduceOp op_;
};

}  // namespace

std::shared_ptr<Work> PersistentShardCollective::gather_blocks(const std::vector<BufferView>&,
                                                               StreamRef) {
  throw Error(ErrorCategory::kInvalidArgument,
              "gather_blocks: this " + method() +
                  " cannot land blocks in other buffers (an all-gather of host memory or by copy "
                  "engines can; gathers_blocks() tells); gather in place with run()");
}

std::unique_ptr<PersistentAllReduce> Communicator::persistent_all_reduce(
    std::vector<BufferView> buffers, ReduceOp op, PersistentOptions options) {
  (void)options;
  return std::make_unique<AllReduceEach>(*this, std::move(buffers), op);
}

std::unique_ptr<PersistentShardCollective> Communicator::persistent_all_gather(
    std::vector<BufferView> sources, PersistentOptions options) {
  (void)options;
  return std::make_unique<ShardCollectiveEach>(*this, std::move(sources), true, ReduceOp::kSum);
}

std::unique_ptr<PersistentShardCollective> Communicator::persistent_reduce_scatter(
    std::vector<BufferView> sources, ReduceOp op, PersistentOptions options) {
  (void)options;
  return std::make_unique<ShardCollectiveEach>(*this, std::move(sources), false, op);
}

}  // namespace rtd
