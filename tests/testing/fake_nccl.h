// FakeNcclApi and FakeCudaApi: scripted stand-ins for NCCL and the CUDA runtime
// that record every call, so that the NCCL backend's ordering, deadline and
// abort logic is tested without a GPU. Handles are made-up pointers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/nccl/cuda_api.h"
#include "collectives/nccl/nccl_api.h"

namespace rtd::testing_util {

// One shared log of calls, in order, e.g. "event_record e1 s0" or "all_reduce s1".
class CallLog {
 public:
  void add(std::string call) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
    threads_.push_back(std::this_thread::get_id());
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // Only the calls the calling thread made (not the watchdog's, say).
  std::vector<std::string> calls_from_this_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> mine;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if (threads_[i] == std::this_thread::get_id()) mine.push_back(calls_[i]);
    }
    return mine;
  }
  int count(const std::string& prefix) {
    int n = 0;
    for (const auto& c : calls()) n += c.rfind(prefix, 0) == 0;
    return n;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
    threads_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> calls_;
  std::vector<std::thread::id> threads_;
};

inline std::string handle_name(const void* p, char kind) {
  return kind + std::to_string(reinterpret_cast<std::uintptr_t>(p) & 0xffff);
}

class FakeCudaApi : public nccl::CudaApi {
 public:
  explicit FakeCudaApi(CallLog* log) : log_(log) {}
  std::atomic<bool> events_complete{true};  // what event_query answers
  std::atomic<bool> records_fail{false};    // event_record answers an error
  // With N >= 0: N more records succeed, then every one fails (-1: never).
  std::atomic<int> records_before_failure{-1};
  // [Capture] The stream being captured into a CUDA graph (null: none). As
  // CUDA does: a stream that waits on an event the capture recorded joins it;
  // an event recorded on a captured stream is captured, and a query of it,
  // or any query from a thread in the global capture mode (the default) while
  // a capture is on, breaks the capture: counted in broken_captures.
  std::atomic<cudaStream_t> capturing{nullptr};
  std::atomic<int> broken_captures{0};

  cudaError_t get_device_count(int* count) override {
    *count = 2;
    return cudaSuccess;
  }
  cudaError_t set_device(int device) override {
    log_->add("set_device " + std::to_string(device));
    return cudaSuccess;
  }
  cudaError_t stream_create(cudaStream_t* s, bool) override {
    *s = reinterpret_cast<cudaStream_t>(0x1000 + next_++);
    log_->add("stream_create " + handle_name(*s, 's'));
    return cudaSuccess;
  }
  cudaError_t stream_destroy(cudaStream_t) override { return cudaSuccess; }
  cudaError_t event_create(cudaEvent_t* e) override {
    *e = reinterpret_cast<cudaEvent_t>(0x2000 + next_++);
    return cudaSuccess;
  }
  cudaError_t event_destroy(cudaEvent_t) override { return cudaSuccess; }
  cudaError_t event_record(cudaEvent_t e, cudaStream_t s) override {
    log_->add("event_record " + handle_name(e, 'e') + " " + handle_name(s, 's'));
    if (records_fail || records_before_failure == 0) return cudaErrorLaunchFailure;
    if (records_before_failure > 0) --records_before_failure;
    std::lock_guard<std::mutex> lock(mu_);
    if (captured_locked(s)) {
      captured_.insert(e);
    } else {
      captured_.erase(e);
    }
    return cudaSuccess;
  }
  cudaError_t event_query(cudaEvent_t e) override {
    log_->add("event_query " + handle_name(e, 'e'));
    std::lock_guard<std::mutex> lock(mu_);
    if (captured_.count(e) != 0) {
      ++broken_captures;
      return cudaErrorCapturedEvent;
    }
    if (capturing.load() != nullptr && thread_mode() != cudaStreamCaptureModeRelaxed) {
      ++broken_captures;
      return cudaErrorStreamCaptureUnsupported;
    }
    return events_complete ? cudaSuccess : cudaErrorNotReady;
  }
  cudaError_t stream_capturing(cudaStream_t s, bool* capturing_now) override {
    std::lock_guard<std::mutex> lock(mu_);
    *capturing_now = captured_locked(s);
    return cudaSuccess;
  }
  cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) override {
    std::swap(thread_mode(), *mode);
    return cudaSuccess;
  }
  cudaError_t stream_wait_event(cudaStream_t s, cudaEvent_t e) override {
    log_->add("stream_wait_event " + handle_name(s, 's') + " " + handle_name(e, 'e'));
    std::lock_guard<std::mutex> lock(mu_);
    if (captured_.count(e) != 0) joined_[s] = capturing.load();
    return cudaSuccess;
  }
  cudaError_t malloc(void** p, size_t) override {
    *p = reinterpret_cast<void*>(0x3000);
    return cudaSuccess;
  }
  cudaError_t free(void*) override { return cudaSuccess; }
  const char* error_string(cudaError_t) override { return "fake CUDA error"; }

 private:
  static cudaStreamCaptureMode& thread_mode() {
    thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    return mode;
  }
  CallLog* log_;
  std::atomic<int> next_{1};
  std::mutex mu_;
  // s is the capturing stream, or joined the capture that is still on (mu_ held).
  bool captured_locked(cudaStream_t s) const {
    if (s == nullptr || capturing.load() == nullptr) return false;
    auto it = joined_.find(s);
    return s == capturing.load() || (it != joined_.end() && it->second == capturing.load());
  }
  std::set<cudaEvent_t> captured_;               // recorded on a captured stream, not since
  std::map<cudaStream_t, cudaStream_t> joined_;  // joined the capture of that stream
};

class FakeNcclApi : public nccl::NcclApi {
 public:
  explicit FakeNcclApi(CallLog* log) : log_(log) {}
  // ncclInProgress answers left before the state turns to async_state.
  std::atomic<int> in_progress_polls{0};
  std::atomic<bool> never_ready{false};
  std::atomic<ncclResult_t> async_state{ncclSuccess};
  std::atomic<ncclResult_t> collective_result{ncclSuccess};

  ncclResult_t get_unique_id(ncclUniqueId* id) override {
    for (char& c : id->internal) c = 'u';
    return ncclSuccess;
  }
  // A blocking init takes this long before it returns (a peer that is late).
  std::atomic<int> blocking_init_ms{0};

  ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                     ncclConfig_t* config) override {
    log_->add("comm_init rank=" + std::to_string(rank) + " of " + std::to_string(nranks) +
              " blocking=" + std::to_string(config->blocking) + " maxCTAs=" +
              std::to_string(config->maxCTAs) + " CTAPolicy=" + std::to_string(config->CTAPolicy));
    if (config->blocking) {  // returns when done, never ncclInProgress
      std::this_thread::sleep_for(std::chrono::milliseconds(blocking_init_ms.load()));
      *comm = reinterpret_cast<ncclComm_t>(0x4000);
      log_->add("comm_init returned");
      return ncclSuccess;
    }
    *comm = reinterpret_cast<ncclComm_t>(0x4000);
    return ncclInProgress;
  }
  ncclResult_t comm_split(ncclComm_t, int color, int key, ncclComm_t* out,
                          ncclConfig_t* config) override {
    log_->add("comm_split " + std::to_string(color) + " " + std::to_string(key) + " blocking=" +
              std::to_string(config->blocking) + " CTAPolicy=" + std::to_string(config->CTAPolicy) +
              (config->splitShare == 1 ? " share" : ""));
    *out = color < 0 ? nullptr : reinterpret_cast<ncclComm_t>(0x5000);
    return ncclInProgress;
  }
  ncclResult_t comm_get_async_error(ncclComm_t, ncclResult_t* state) override {
    log_->add("get_async_error");
    if (never_ready || in_progress_polls.fetch_sub(1) > 0) {
      *state = ncclInProgress;
    } else {
      *state = async_state;
    }
    return ncclSuccess;
  }
  ncclResult_t comm_finalize(ncclComm_t) override {
    log_->add("comm_finalize");
    return ncclSuccess;
  }
  ncclResult_t comm_destroy(ncclComm_t) override {
    log_->add("comm_destroy");
    return ncclSuccess;
  }
  ncclResult_t comm_abort(ncclComm_t) override {
    log_->add("comm_abort");
    aborted = true;
    return ncclSuccess;
  }
  std::atomic<bool> block_collectives{false};  // all_reduce blocks until comm_abort
  std::atomic<bool> aborted{false};
  ncclResult_t comm_user_rank(ncclComm_t, int* rank) override {
    *rank = 0;
    return ncclSuccess;
  }
  ncclResult_t comm_count(ncclComm_t, int* count) override {
    *count = 1;
    return ncclSuccess;
  }
  ncclResult_t group_start() override {
    log_->add("group_start");
    return ncclSuccess;
  }
  ncclResult_t group_end() override {
    log_->add("group_end");
    return ncclSuccess;
  }
  std::atomic<int> last_op{-1};  // the ncclRedOp_t of the last all_reduce or reduce_scatter
  ncclResult_t all_reduce(const void*, void*, size_t count, ncclDataType_t, ncclRedOp_t op,
                          ncclComm_t, cudaStream_t s) override {
    last_op = op;
    log_->add("all_reduce " + std::to_string(count) + " " + handle_name(s, 's'));
    while (block_collectives && !aborted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return block_collectives ? ncclSystemError : collective_result.load();
  }
  ncclResult_t broadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                         cudaStream_t s) override {
    log_->add("broadcast " + handle_name(s, 's'));
    return collective_result;
  }
  ncclResult_t reduce_scatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t op,
                              ncclComm_t, cudaStream_t s) override {
    last_op = op;
    log_->add("reduce_scatter " + handle_name(s, 's'));
    return collective_result;
  }
  ncclResult_t all_gather(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                          cudaStream_t s) override {
    log_->add("all_gather " + handle_name(s, 's'));
    return collective_result;
  }
  ncclResult_t send(const void*, size_t, ncclDataType_t, int peer, ncclComm_t,
                    cudaStream_t) override {
    log_->add("send " + std::to_string(peer));
    return collective_result;
  }
  ncclResult_t recv(void*, size_t, ncclDataType_t, int peer, ncclComm_t, cudaStream_t) override {
    log_->add("recv " + std::to_string(peer));
    return collective_result;
  }
  std::atomic<ncclResult_t> register_result{ncclSuccess};
  ncclResult_t mem_alloc(void** ptr, size_t bytes) override {
    log_->add("mem_alloc " + std::to_string(bytes));
    *ptr = reinterpret_cast<void*>(0x6000);
    return ncclSuccess;
  }
  ncclResult_t mem_free(void*) override {
    log_->add("mem_free");
    return ncclSuccess;
  }
  ncclResult_t comm_register(ncclComm_t, void*, size_t bytes, void** handle) override {
    log_->add("comm_register " + std::to_string(bytes));
    *handle = reinterpret_cast<void*>(0x7000);
    return register_result;
  }
  ncclResult_t comm_deregister(ncclComm_t, void*) override {
    log_->add("comm_deregister");
    return ncclSuccess;
  }
  const char* error_string(ncclResult_t) override { return "fake NCCL error"; }
  const char* last_error(ncclComm_t) override { return "remote peer went away"; }

 private:
  CallLog* log_;
};

}  // namespace rtd::testing_util
