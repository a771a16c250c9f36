// The real CudaApi: one CUDA runtime call per method, except an event's
// record and a stream's capture status, which go to the driver first.
#include "collectives/nccl/cuda_api.h"

#include "collectives/nccl/driver_api.h"

namespace rtd::nccl {
namespace {

class RealCudaApi : public CudaApi {
 public:
  cudaError_t get_device_count(int* count) override { return cudaGetDeviceCount(count); }
  cudaError_t set_device(int device) override { return cudaSetDevice(device); }
  cudaError_t stream_create(cudaStream_t* stream, bool highest_priority) override {
    if (!highest_priority) return cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking);
    int least = 0, greatest = 0;
    cudaError_t rc = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (rc != cudaSuccess) return rc;
    return cudaStreamCreateWithPriority(stream, cudaStreamNonBlocking, greatest);
  }
  cudaError_t stream_destroy(cudaStream_t stream) override { return cudaStreamDestroy(stream); }
  cudaError_t event_create(cudaEvent_t* event) override {
    return cudaEventCreateWithFlags(event, cudaEventDisableTiming);
  }
  cudaError_t event_destroy(cudaEvent_t event) override { return cudaEventDestroy(event); }
  // Through the driver, which skips the runtime's layer (0.04-0.11 us of the
  // 0.14-0.43 an end event costs a call on H200 hosts); through the runtime
  // where the driver's refuses (no context current on this thread, which the
  // runtime makes current), so that an error is the runtime's. The driver's
  // entry point is looked up at the first record: a machine without a GPU
  // never asks for it.
  // A covered call's end may be recorded on another thread (the watchdog's,
  // or one whose Work waits: CommState::record_pending), which may have no
  // current context: it records in the stream's own, as stream_capturing asks.
  cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) override {
    static const DriverApi& api = driver_api();
    if (api.event_record != nullptr) {
      if (api.event_record(event, stream) == CUDA_SUCCESS) [[likely]]
        return cudaSuccess;
      if (record_in_own_context(api, event, stream)) return cudaSuccess;
    }
    return cudaEventRecord(event, stream);
  }
  cudaError_t event_query(cudaEvent_t event) override { return cudaEventQuery(event); }
  cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event) override {
    return cudaStreamWaitEvent(stream, event, 0);
  }
  // Through the driver as event_record is, for the same reason: every call
  // asks (about 0.07 us through the runtime on an H200 host). A thread with no
  // current context (one that never used CUDA) asks in the stream's own
  // context and is left as it was: the runtime would make its device 0's
  // current there, whatever the stream's device, and the calls that follow
  // on this thread would then fail. The legacy stream is never captured.
  cudaError_t stream_capturing(cudaStream_t stream, bool* capturing) override {
    static const DriverApi& api = driver_api();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (api.stream_is_capturing != nullptr) {
      if (api.stream_is_capturing(stream, &status) != CUDA_SUCCESS)
        return ask_in_own_context(api, stream, capturing);
      *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
      return cudaSuccess;
    }
    return runtime_capturing(stream, capturing);
  }
  // Through the driver, which needs no current context: the runtime's call
  // first makes the thread's device's primary context current, and on a
  // thread that never chose a device (the watchdog's, a caller's fresh one)
  // that is device 0's: a context more, of about half a GiB, on another
  // rank's GPU (a two-rank job's GPU 0 held 0.51 GiB more with the
  // runtime's call on the watchdog's thread: 411ccc3:docs/benchmarks.md).
  cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) override {
    static const auto exchange = driver_api().thread_exchange_capture_mode;
    if (exchange == nullptr) return cudaThreadExchangeStreamCaptureMode(mode);
    auto driver_mode = static_cast<CUstreamCaptureMode>(*mode);
    if (exchange(&driver_mode) != CUDA_SUCCESS) return cudaErrorUnknown;
    *mode = static_cast<cudaStreamCaptureMode>(driver_mode);
    return cudaSuccess;
  }
  cudaError_t malloc(void** ptr, size_t bytes) override { return cudaMalloc(ptr, bytes); }
  cudaError_t free(void* ptr) override { return cudaFree(ptr); }
  const char* error_string(cudaError_t error) override { return cudaGetErrorString(error); }

 private:
  static cudaError_t runtime_capturing(cudaStream_t stream, bool* capturing) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t rc = cudaStreamIsCapturing(stream, &status);
    *capturing = status != cudaStreamCaptureStatusNone;
    return rc;
  }
  // Pushes the stream's context for one call (fn(): whether it succeeded);
  // false where the stream has none of its own (the legacy and per-thread
  // handles) or the driver refuses.
  template <typename Fn>
  static bool in_own_context(const DriverApi& api, cudaStream_t stream, Fn fn) {
    if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
      return false;
    CUcontext context = nullptr;
    if (api.stream_get_ctx == nullptr || api.ctx_push_current == nullptr ||
        api.ctx_pop_current == nullptr || api.stream_get_ctx(stream, &context) != CUDA_SUCCESS ||
        api.ctx_push_current(context) != CUDA_SUCCESS) {
      return false;
    }
    const bool ok = fn();
    CUcontext popped = nullptr;
    api.ctx_pop_current(&popped);
    return ok;
  }
  static bool record_in_own_context(const DriverApi& api, cudaEvent_t event, cudaStream_t stream) {
    return in_own_context(api, stream,
                          [&] { return api.event_record(event, stream) == CUDA_SUCCESS; });
  }
  static cudaError_t ask_in_own_context(const DriverApi& api, cudaStream_t stream,
                                        bool* capturing) {
    *capturing = false;
    if (stream == nullptr || stream == cudaStreamLegacy) return cudaSuccess;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = CUDA_ERROR_UNKNOWN;
    if (!in_own_context(api, stream, [&] {
          rc = api.stream_is_capturing(stream, &status);
          return true;
        })) {
      return runtime_capturing(stream, capturing);  // the runtime's error, then
    }
    *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
    return rc == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidResourceHandle;
  }
};

}  // namespace

std::shared_ptr<CudaApi> real_cuda_api() {
  static auto api = std::make_shared<RealCudaApi>();
  return api;
}

}  // namespace rtd::nccl
