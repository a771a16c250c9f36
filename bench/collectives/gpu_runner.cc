// The collective benchmark on GPUs: "ours" goes through our NCCL communicator
// (each operation ordered after the benchmark's stream and the stream ordered
// after it again, as a trainer would), "raw" calls NCCL directly on one stream
// with no layer of ours, "paired" holds both in one process (two NCCL
// communicators on the same GPUs) so that their blocks alternate on the same
// buffers, with three more rows between them that add to raw NCCL what our
// layer does on the device, without the rest of our layer: "raw_end" an end
// event recorded after each call (what a call on the caller's stream adds),
// "raw_end_drv" the same event recorded through the driver's cuEventRecord
// rather than the runtime's cudaEventRecord, "raw_end_cap" that and the
// driver's answer whether the stream is being captured into a CUDA graph
// (what our layer asks after each call), and "raw_fork" the call on a
// second stream ordered after the benchmark's by an event and the
// benchmark's after it by another (what the default adds for calls above
// RTD_NCCL_INLINE_BYTES); with --host-delay-ns, "raw_delay" is raw_end_drv
// and that much host time that touches no memory. All are timed with CUDA
// events on the benchmark's stream.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench/collectives/runner.h"
#include "bench/common/gpu_check.h"
#include "collectives/nccl/driver_api.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_types.h"
#include "rt_dist/rt_dist.h"

namespace rtd::bench {
namespace {

class GpuRunner : public Runner {
 public:
  GpuRunner(const std::string& mode, const std::string& raw_init, long long host_delay_ns)
      : variant_(mode == "raw" ? kRaw : kOurs),
        paired_(mode == "paired"),
        raw_init_(raw_init),
        host_delay_(host_delay_ns) {
    if (paired_) {
      rows_ = {kRaw, kRawEnd, kRawEndDriver, kRawEndCapture, kRawFork};
      if (host_delay_ns > 0) rows_.push_back(kRawDelay);
      rows_.push_back(kOurs);  // last: the host sampler's default
    }
    const bool raw = variant_ == kRaw;
    // Raw mode uses our context only for the store that carries NCCL's unique id.
    ctx_ = init(InitOptions{.backend = raw ? Backend::kGloo : Backend::kNccl});
    cuda_check(cudaSetDevice(ctx_->local_rank()), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    cuda_check(cudaEventCreate(&start_), "event");
    cuda_check(cudaEventCreate(&stop_), "event");
    if (raw || paired_) init_raw_comm();
    if (paired_) {
      cuda_check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "stream");
      for (cudaEvent_t& e : marks_) {
        cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
      }
      if (!nccl::driver_api().event_record)
        throw std::runtime_error("raw_end_drv: the driver has no cuEventRecord");
      if (!nccl::driver_api().stream_is_capturing)
        throw std::runtime_error("raw_end_cap: the driver has no cuStreamIsCapturing");
    }
  }
  ~GpuRunner() override {
    if (raw_comm_ && raw_init_ != "ours") ncclCommDestroy(raw_comm_);
  }

  int rank() const override { return ctx_->rank(); }
  int size() const override { return ctx_->world_size(); }
  std::string describe() const override {
    if (paired_) {
      return "raw NCCL, raw NCCL with an end event recorded by the runtime (raw_end) or the "
             "driver (raw_end_drv), that and the driver's capture question (raw_end_cap), or "
             "on a second stream ordered by events (raw_fork), and our "
             "NCCL communicator, alternating blocks";
    }
    return variant_ == kRaw ? "raw NCCL (ncclAllReduce etc. on one stream)"
                            : "our NCCL communicator";
  }
  std::vector<std::string> variants() const override {
    if (!paired_) return {""};
    static const char* const kNames[] = {"raw",      "raw_end",   "raw_end_drv", "raw_end_cap",
                                         "raw_fork", "raw_delay", "ours"};
    std::vector<std::string> names;
    for (Variant v : rows_) names.emplace_back(kNames[v]);
    return names;
  }
  void select(std::size_t variant) override {
    if (paired_) variant_ = rows_.at(variant);
  }
  double host_us() const override { return host_us_; }
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
    const auto host_start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      cudaEvent_t mark = marks_[i % kMarks];
      switch (variant_) {
        case kRaw:
          raw_issue(op, b, stream_);
          break;
        case kRawEnd:
          raw_issue(op, b, stream_);
          cuda_check(cudaEventRecord(mark, stream_), "record");
          break;
        case kRawFork:
          cuda_check(cudaEventRecord(fork_mark(), stream_), "record");
          cuda_check(cudaStreamWaitEvent(side_, fork_mark(), 0), "wait");
          raw_issue(op, b, side_);
          cuda_check(cudaEventRecord(mark, side_), "record");
          cuda_check(cudaStreamWaitEvent(stream_, mark, 0), "wait");
          break;
        case kRawEndDriver:
          raw_issue(op, b, stream_);
          record_through_driver(mark);
          break;
        case kRawEndCapture: {
          raw_issue(op, b, stream_);
          record_through_driver(mark);
          CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
          if (nccl::driver_api().stream_is_capturing(stream_, &status) != CUDA_SUCCESS ||
              status != CU_STREAM_CAPTURE_STATUS_NONE)
            throw std::runtime_error("cuStreamIsCapturing failed or answered capturing");
          break;
        }
        case kRawDelay: {
          raw_issue(op, b, stream_);
          record_through_driver(mark);
          const auto until = std::chrono::steady_clock::now() + host_delay_;
          while (std::chrono::steady_clock::now() < until) {
          }
          break;
        }
        case kOurs:
          ours_issue(op, b)->wait(StreamRef{stream_});
          break;
      }
    }
    host_us_ =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - host_start)
            .count() /
        iters;
    cuda_check(cudaEventRecord(stop_, stream_), "record");
    cuda_check(cudaEventSynchronize(stop_), "sync");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "elapsed");
    return ms * 1e3 / iters;
  }

  void barrier() override {
    ctx_->store().add("bench/barrier", 0);  // keeps the store connection warm
    if (variant_ != kOurs) {
      nccl_check(ncclAllReduce(scratch(), scratch(), 1, ncclFloat32, ncclSum, raw_comm_, stream_),
                 "barrier");
    } else {
      ctx_->comm().barrier(StreamRef{stream_})->wait(StreamRef{stream_});
    }
    cuda_check(cudaStreamSynchronize(stream_), "barrier sync");
  }

 private:
  void init_raw_comm() {
    if (raw_init_ == "ours") {  // raw calls on our communicator's own NCCL handle
      auto* ours = dynamic_cast<nccl::NcclCommunicator*>(&ctx_->comm());
      if (ours == nullptr) throw std::runtime_error("--raw-init ours: not an NCCL communicator");
      raw_comm_ = ours->native_comm();
      return;
    }
    ncclUniqueId id;
    if (ctx_->rank() == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      ctx_->store().set("bench/raw_nccl_id", std::string(reinterpret_cast<char*>(&id), sizeof(id)));
    } else {
      std::string bytes = ctx_->store().get("bench/raw_nccl_id", std::chrono::seconds(120));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    if (raw_init_ != "thread") {
      nccl_check(ncclCommInitRank(&raw_comm_, ctx_->world_size(), id, ctx_->rank()),
                 "ncclCommInitRank");
      return;
    }
    ncclResult_t rc = ncclSuccess;
    std::thread([&] {
      cudaSetDevice(ctx_->local_rank());
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 1;
      rc = ncclCommInitRankConfig(&raw_comm_, ctx_->world_size(), id, ctx_->rank(), &config);
    }).join();
    nccl_check(rc, "ncclCommInitRankConfig on its own thread");
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

  cudaEvent_t fork_mark() { return marks_[kMarks]; }

  void record_through_driver(cudaEvent_t mark) {
    if (nccl::driver_api().event_record(mark, stream_) != CUDA_SUCCESS)
      throw std::runtime_error("cuEventRecord failed");
  }

  void raw_issue(const std::string& op, const OpBuffers& b, cudaStream_t stream) {
    ncclDataType_t t = nccl::to_nccl(b.dtype);
    if (op == "all_reduce") {
      nccl_check(ncclAllReduce(b.in, b.out, b.in_count, t, ncclSum, raw_comm_, stream), op.c_str());
    } else if (op == "reduce_scatter") {
      nccl_check(ncclReduceScatter(b.in, b.out, b.out_count, t, ncclSum, raw_comm_, stream),
                 op.c_str());
    } else if (op == "all_gather") {
      nccl_check(ncclAllGather(b.in, b.out, b.in_count, t, raw_comm_, stream), op.c_str());
    } else if (op == "broadcast") {
      nccl_check(ncclBroadcast(b.out, b.out, b.out_count, t, 0, raw_comm_, stream), op.c_str());
    } else {
      const int n = size();
      const std::size_t block = b.in_count / n, bytes = block * dtype_size(b.dtype);
      nccl_check(ncclGroupStart(), "group");
      for (int p = 0; p < n; ++p) {
        nccl_check(ncclSend(static_cast<char*>(b.in) + p * bytes, block, t, p, raw_comm_, stream),
                   "send");
        nccl_check(ncclRecv(static_cast<char*>(b.out) + p * bytes, block, t, p, raw_comm_, stream),
                   "recv");
      }
      nccl_check(ncclGroupEnd(), "group");
    }
  }

  enum Variant { kRaw, kRawEnd, kRawEndDriver, kRawEndCapture, kRawFork, kRawDelay, kOurs };
  std::vector<Variant> rows_;            // paired mode's rows, in order
  Variant variant_;                      // what time() runs
  bool paired_;                          // every variant, chosen by select()
  std::string raw_init_;                 // --raw-init
  std::chrono::nanoseconds host_delay_;  // --host-delay-ns (raw_delay)
  double host_us_ = -1;
  std::shared_ptr<Context> ctx_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_ = nullptr;         // raw_fork's second stream
  static constexpr int kMarks = 64;     // end events in rotation
  cudaEvent_t marks_[kMarks + 1] = {};  // the last: raw_fork's fork event
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  ncclComm_t raw_comm_ = nullptr;
  void* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Runner> make_gpu_runner(const std::string& mode, const std::string& raw_init,
                                        long long host_delay_ns) {
  return std::make_unique<GpuRunner>(mode, raw_init, host_delay_ns);
}

}  // namespace rtd::bench
