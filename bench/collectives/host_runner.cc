// The collective benchmark over our host communicators (Gloo, or MPI under
// mpirun): host buffers, host clock.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "bench/collectives/runner.h"
#include "rt_dist/rt_dist.h"

namespace rtd::bench {
namespace {

std::shared_ptr<Work> issue(Communicator& comm, const std::string& op, const OpBuffers& b,
                            StreamRef stream) {
  BufferView in{b.in, b.in_count, b.dtype, DeviceType::kCpu};
  BufferView out{b.out, b.out_count, b.dtype, DeviceType::kCpu};
  if (op == "all_reduce") return comm.all_reduce(in, out, ReduceOp::kSum, stream);
  if (op == "reduce_scatter") return comm.reduce_scatter(in, out, ReduceOp::kSum, stream);
  if (op == "all_gather") return comm.all_gather(in, out, stream);
  if (op == "broadcast") return comm.broadcast(out, 0, stream);
  return comm.all_to_all(in, out, stream);
}

class HostRunner : public Runner {
 public:
  explicit HostRunner(Backend backend) : ctx_(init(InitOptions{.backend = backend})) {}
  int rank() const override { return ctx_->rank(); }
  int size() const override { return ctx_->world_size(); }
  std::string describe() const override {
    return "our " + ctx_->comm().backend() + " communicator (CPU)";
  }
  void* alloc(std::size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void release(void* ptr) override { std::free(ptr); }
  void upload(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  void download(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  double time(const std::string& op, const OpBuffers& b, int iters) override {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) issue(ctx_->comm(), op, b, {})->wait();
    std::chrono::duration<double, std::micro> spent = std::chrono::steady_clock::now() - start;
    return spent.count() / iters;
  }
  void barrier() override { ctx_->comm().barrier()->wait(); }

 private:
  std::shared_ptr<Context> ctx_;
};

}  // namespace

std::unique_ptr<Runner> make_host_runner(const std::string& mode) {
  return std::make_unique<HostRunner>(mode == "mpi" ? Backend::kMpi : Backend::kGloo);
}

}  // namespace rtd::bench
