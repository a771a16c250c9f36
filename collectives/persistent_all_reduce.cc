// The default PersistentAllReduce: one all_reduce per run.
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

}  // namespace

std::unique_ptr<PersistentAllReduce> Communicator::persistent_all_reduce(
    std::vector<BufferView> buffers, ReduceOp op, PersistentAllReduceOptions options) {
  (void)options;
  return std::make_unique<AllReduceEach>(*this, std::move(buffers), op);
}

}  // namespace rtd
