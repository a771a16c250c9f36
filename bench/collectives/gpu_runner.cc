// The collective benchmark on GPUs: "ours" goes through our NCCL communicator
// (each operation ordered after the benchmark's stream and the stream ordered
// after it again, as a trainer would), "raw" calls NCCL directly on one stream
// with no layer of ours, "paired" holds both in one process (two NCCL
// communicators on the same GPUs) so that their blocks alternate on the same
// buffers. All are timed with CUDA events on the benchmark's stream.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "bench/collectives/runner.h"
#include "bench/common/gpu_check.h"
#include "collectives/nccl/nccl_types.h"
#include "rt_dist/rt_dist.h"

namespace rtd::bench {
namespace {

class GpuRunner : public Runner {
 public:
  explicit GpuRunner(const std::string& mode) : raw_(mode == "raw"), paired_(mode == "paired") {
    // Raw mode uses our context only for the store that carries NCCL's unique id.
    ctx_ = init(InitOptions{.backend = raw_ ? Backend::kGloo : Backend::kNccl});
    cuda_check(cudaSetDevice(ctx_->local_rank()), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    cuda_check(cudaEventCreate(&start_), "event");
    cuda_check(cudaEventCreate(&stop_), "event");
    if (raw_ || paired_) init_raw_comm();
  }
  ~GpuRunner() override {
    if (raw_comm_) ncclCommDestroy(raw_comm_);
  }

  int rank() const override { return ctx_->rank(); }
  int size() const override { return ctx_->world_size(); }
  std::string describe() const override {
    if (paired_) return "raw NCCL and our NCCL communicator, alternating blocks";
    return raw_ ? "raw NCCL (ncclAllReduce etc. on one stream)" : "our NCCL communicator";
  }
  std::vector<std::string> variants() const override {
    if (paired_) return {"raw", "ours"};
    return {""};
  }
  void select(std::size_t variant) override {
    if (paired_) raw_ = variant == 0;
  }
  void* alloc(std::size_t bytes) override {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void release(void* ptr) override { cudaFree(ptr); }
  void upload(void* dst, const void* src, std::size_t n) override {
    cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "upload");
  }
  void download(void* dst, const void* src, std::size_t n) override {
    cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "download");
  }

  double time(const std::string& op, const OpBuffers& b, int iters) override {
    cuda_check(cudaEventRecord(start_, stream_), "record");
    for (int i = 0; i < iters; ++i) {
      if (raw_) {
        raw_issue(op, b);
      } else {
        ours_issue(op, b)->wait(StreamRef{stream_});
      }
    }
    cuda_check(cudaEventRecord(stop_, stream_), "record");
    cuda_check(cudaEventSynchronize(stop_), "sync");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "elapsed");
    return ms * 1e3 / iters;
  }

  void barrier() override {
    ctx_->store().add("bench/barrier", 0);  // keeps the store connection warm
    if (raw_comm_) {
      nccl_check(ncclAllReduce(scratch(), scratch(), 1, ncclFloat32, ncclSum, raw_comm_, stream_),
                 "barrier");
    } else {
      ctx_->comm().barrier(StreamRef{stream_})->wait(StreamRef{stream_});
    }
    cuda_check(cudaStreamSynchronize(stream_), "barrier sync");
  }

 private:
  void init_raw_comm() {
    ncclUniqueId id;
    if (ctx_->rank() == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      ctx_->store().set("bench/raw_nccl_id", std::string(reinterpret_cast<char*>(&id), sizeof(id)));
    } else {
      std::string bytes = ctx_->store().get("bench/raw_nccl_id", std::chrono::seconds(120));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    nccl_check(ncclCommInitRank(&raw_comm_, ctx_->world_size(), id, ctx_->rank()),
               "ncclCommInitRank");
  }

  void* scratch() {
    if (!scratch_) scratch_ = alloc(sizeof(float));
    return scratch_;
  }

  std::shared_ptr<Work> ours_issue(const std::string& op, const OpBuffers& b) {
    Communicator& comm = ctx_->comm();
    BufferView in{b.in, b.in_count, b.dtype, DeviceType::kCuda};
    BufferView out{b.out, b.out_count, b.dtype, DeviceType::kCuda};
    StreamRef s{stream_};
    if (op == "all_reduce") return comm.all_reduce(in, out, ReduceOp::kSum, s);
    if (op == "reduce_scatter") return comm.reduce_scatter(in, out, ReduceOp::kSum, s);
    if (op == "all_gather") return comm.all_gather(in, out, s);
    if (op == "broadcast") return comm.broadcast(out, 0, s);
    return comm.all_to_all(in, out, s);
  }

  void raw_issue(const std::string& op, const OpBuffers& b) {
    ncclDataType_t t = nccl::to_nccl(b.dtype);
    if (op == "all_reduce") {
      nccl_check(ncclAllReduce(b.in, b.out, b.in_count, t, ncclSum, raw_comm_, stream_),
                 op.c_str());
    } else if (op == "reduce_scatter") {
      nccl_check(ncclReduceScatter(b.in, b.out, b.out_count, t, ncclSum, raw_comm_, stream_),
                 op.c_str());
    } else if (op == "all_gather") {
      nccl_check(ncclAllGather(b.in, b.out, b.in_count, t, raw_comm_, stream_), op.c_str());
    } else if (op == "broadcast") {
      nccl_check(ncclBroadcast(b.out, b.out, b.out_count, t, 0, raw_comm_, stream_), op.c_str());
    } else {
      const int n = size();
      const std::size_t block = b.in_count / n, bytes = block * dtype_size(b.dtype);
      nccl_check(ncclGroupStart(), "group");
      for (int p = 0; p < n; ++p) {
        nccl_check(ncclSend(static_cast<char*>(b.in) + p * bytes, block, t, p, raw_comm_, stream_),
                   "send");
        nccl_check(ncclRecv(static_cast<char*>(b.out) + p * bytes, block, t, p, raw_comm_, stream_),
                   "recv");
      }
      nccl_check(ncclGroupEnd(), "group");
    }
  }

  bool raw_;     // time() calls NCCL directly
  bool paired_;  // both ways, raw_ chosen by select()
  std::shared_ptr<Context> ctx_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  ncclComm_t raw_comm_ = nullptr;
  void* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Runner> make_gpu_runner(const std::string& mode) {
  return std::make_unique<GpuRunner>(mode);
}

}  // namespace rtd::bench
