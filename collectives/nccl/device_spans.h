// DeviceSpans: work on a GPU's streams as spans of the trace (rt_dist/trace.h):
// the copy engines' individual copies, the addition kernel, NCCL's kernels.
// A span is timed by two CUDA events around the work and placed on the
// trace's host clock when both have completed; nothing waits for them.
//
// [Clock] An anchor event, recorded on an idle stream of its own and polled
// until done, gets a host time: the end of the poll (the record itself waits
// behind the submission, and on a GPU that processes share, behind their time
// slices; the spinning poll sees it done within a microsecond or two). Of
// three tries the narrowest window is kept. A GPU event is then placed at
// anchor + cudaEventElapsedTime. The anchor is renewed every 10 s, so that the
// float milliseconds keep their microseconds and the clocks' drift stays small.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rtd::nccl {

class DeviceSpans {
 public:
  // Where finished spans go: trace::span by default; tests pass their own.
  using Sink =
      std::function<void(const std::string& name, const std::string& track, std::int64_t start_us,
                         std::int64_t end_us, const std::string& detail)>;

  // nullptr unless the trace is on (RTD_TRACE_DIR): then no event is made.
  static std::unique_ptr<DeviceSpans> create_if_tracing(int device);
  DeviceSpans(int device, Sink sink);
  // Waits (a few seconds at most) for the pending spans and hands them to the sink.
  ~DeviceSpans();
  DeviceSpans(const DeviceSpans&) = delete;
  DeviceSpans& operator=(const DeviceSpans&) = delete;

  // A span's start, recorded on `stream` now; end() closes it on the same stream.
  struct Anchor;
  struct Mark {
    cudaEvent_t event = nullptr;
    std::shared_ptr<Anchor> anchor;  // done before `event` was recorded
  };
  Mark begin(cudaStream_t stream);
  void end(Mark start, cudaStream_t stream, std::string name, std::string track,
           std::string detail);

  // Hands the spans whose work has finished to the sink; never waits.
  void collect();

 private:
  struct Span {
    std::string name, track, detail;
    cudaEvent_t start = nullptr, end = nullptr;
    std::shared_ptr<Anchor> anchor;
  };

  cudaEvent_t take_event();
  std::shared_ptr<Anchor> anchor();  // the current one, renewed when due
  bool place(const Span& s);         // false while its work runs

  int device_;
  Sink sink_;
  cudaStream_t clock_stream_ = nullptr;
  std::mutex mu_;
  std::shared_ptr<Anchor> anchor_;
  bool no_clock_ = false;  // the first anchor failed: no span is kept
  std::vector<Span> pending_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace rtd::nccl
