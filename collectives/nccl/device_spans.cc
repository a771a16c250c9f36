// DeviceSpans: GPU work as trace spans, placed by an anchor event (device_spans.h).
#include "collectives/nccl/device_spans.h"

#include <thread>

#include "rt_dist/trace.h"
#include "runtime/core/log.h"

namespace rtd::nccl {
namespace {

constexpr std::int64_t kAnchorLifeUs = 10'000'000;
constexpr std::int64_t kDrainUs = 5'000'000;
constexpr int kAnchorTries = 3;

}  // namespace

struct DeviceSpans::Anchor {
  cudaEvent_t event = nullptr;
  std::int64_t host_us = 0;
  std::int64_t renew_at_us = 0;
  ~Anchor() {
    if (event) cudaEventDestroy(event);
  }
};

std::unique_ptr<DeviceSpans> DeviceSpans::create_if_tracing(int device) {
  if (!trace::enabled()) return nullptr;
  return std::make_unique<DeviceSpans>(
      device, [](const std::string& name, const std::string& track, std::int64_t start_us,
                 std::int64_t end_us, const std::string& detail) {
        trace::span(name, "gpu", track, start_us, end_us, detail);
      });
}

DeviceSpans::DeviceSpans(int device, Sink sink) : device_(device), sink_(std::move(sink)) {
  cudaSetDevice(device_);
  if (cudaStreamCreateWithFlags(&clock_stream_, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    clock_stream_ = nullptr;  // no clock: begin() gives empty marks, and no span is kept
  }
}

DeviceSpans::~DeviceSpans() {
  cudaSetDevice(device_);
  // The work these spans time was queued by calls that have returned: it ends,
  // or fails (a failed context answers every query, which ends the wait too).
  // Work stuck for good (a stream waiting on a peer that is gone) is given up
  // after a few seconds, and its spans are left out.
  const std::int64_t give_up = trace::now_us() + kDrainUs;
  for (;;) {
    collect();
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty() || trace::now_us() > give_up) break;
    std::this_thread::yield();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Span& s : pending_) {  // destroying a pending event is allowed
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.end);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  anchor_.reset();
  if (clock_stream_) cudaStreamDestroy(clock_stream_);
}

cudaEvent_t DeviceSpans::take_event() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {  // timing enabled
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

std::shared_ptr<DeviceSpans::Anchor> DeviceSpans::anchor() {
  const std::int64_t now = trace::now_us();
  if ((anchor_ && now < anchor_->renew_at_us) || no_clock_) return anchor_;
  // The event's GPU time lies between the record call and the poll that sees
  // it done, nearer the poll's end (the record waits behind the submission,
  // and behind other processes' time slices on a shared GPU; the poll spins).
  // Of a few tries, the one with the narrowest window is kept, so that a
  // thread preempted between the poll and the clock's read is not.
  std::shared_ptr<Anchor> best;
  std::int64_t best_window = 0;
  cudaError_t rc = cudaSuccess;
  for (int attempt = 0; attempt < kAnchorTries && rc == cudaSuccess; ++attempt) {
    auto a = std::make_shared<Anchor>();
    if (!clock_stream_ || (rc = cudaEventCreate(&a->event)) != cudaSuccess) break;
    const std::int64_t before = trace::now_us();
    rc = cudaEventRecord(a->event, clock_stream_);
    while (rc == cudaSuccess && (rc = cudaEventQuery(a->event)) == cudaErrorNotReady &&
           trace::now_us() - before < kDrainUs) {
      rc = cudaSuccess;  // not yet: poll again
    }
    if (rc != cudaSuccess) break;
    a->host_us = trace::now_us();
    if (!best || a->host_us - before < best_window) {
      best_window = a->host_us - before;
      best = std::move(a);
    }
  }
  if (!best) {
    cudaGetLastError();
    if (!anchor_) {
      no_clock_ = true;  // not tried again
      log::get("trace")->warn("GPU {}: GPU work is left out of the trace: its clock anchor {} ({})",
                              device_, rc == cudaErrorNotReady ? "did not complete" : "failed",
                              cudaGetErrorString(rc));
    }
    return anchor_;  // the old one (or none) still places spans
  }
  cudaGetLastError();
  best->renew_at_us = best->host_us + kAnchorLifeUs;
  anchor_ = std::move(best);
  return anchor_;
}

DeviceSpans::Mark DeviceSpans::begin(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Mark m{take_event(), anchor()};
  if (m.event && m.anchor && cudaEventRecord(m.event, stream) == cudaSuccess) return m;
  cudaGetLastError();
  if (m.event) free_.push_back(m.event);
  return Mark{};
}

void DeviceSpans::end(Mark start, cudaStream_t stream, std::string name, std::string track,
                      std::string detail) {
  if (!start.event) return;  // begin() could not mark: the span is left out
  std::lock_guard<std::mutex> lock(mu_);
  cudaEvent_t e = take_event();
  if (!e || cudaEventRecord(e, stream) != cudaSuccess) {
    cudaGetLastError();
    free_.push_back(start.event);
    if (e) free_.push_back(e);
    return;
  }
  pending_.push_back(Span{std::move(name), std::move(track), std::move(detail), start.event, e,
                          std::move(start.anchor)});
}

bool DeviceSpans::place(const Span& s) {
  const cudaError_t rc = cudaEventQuery(s.end);
  if (rc == cudaErrorNotReady) return false;
  float from_ms = 0, to_ms = 0;
  if (rc == cudaSuccess &&
      cudaEventElapsedTime(&from_ms, s.anchor->event, s.start) == cudaSuccess &&
      cudaEventElapsedTime(&to_ms, s.anchor->event, s.end) == cudaSuccess) {
    sink_(s.name, s.track, s.anchor->host_us + static_cast<std::int64_t>(from_ms * 1000.0),
          s.anchor->host_us + static_cast<std::int64_t>(to_ms * 1000.0), s.detail);
  } else {
    cudaGetLastError();  // a failed context: the span is dropped, the error is the caller's
  }
  return true;
}

void DeviceSpans::collect() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t kept = 0;
  for (Span& s : pending_) {
    if (place(s)) {
      free_.push_back(s.start);
      free_.push_back(s.end);
    } else {
      if (&pending_[kept] != &s) pending_[kept] = std::move(s);
      ++kept;
    }
  }
  pending_.resize(kept);
}

}  // namespace rtd::nccl
