// CudaApi: the CUDA runtime calls the NCCL backend makes, behind an interface so
// that ordering, deadline and abort logic is unit-tested with a fake and no GPU.
// No method synchronizes the host: there is deliberately no synchronize here.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

namespace rtd::nccl {

class CudaApi {
 public:
  virtual ~CudaApi() = default;
  virtual cudaError_t get_device_count(int* count) = 0;
  virtual cudaError_t set_device(int device) = 0;
  // A non-blocking stream of the highest priority (communication should not queue behind compute).
  // highest_priority: the device's highest stream priority, else the default one.
  virtual cudaError_t stream_create(cudaStream_t* stream, bool highest_priority) = 0;
  virtual cudaError_t stream_destroy(cudaStream_t stream) = 0;
  virtual cudaError_t event_create(cudaEvent_t* event) = 0;  // timing disabled
  virtual cudaError_t event_destroy(cudaEvent_t event) = 0;
  virtual cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) = 0;
  // cudaSuccess when complete, cudaErrorNotReady while pending.
  virtual cudaError_t event_query(cudaEvent_t event) = 0;
  virtual cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event) = 0;
  // Whether work on stream is being captured into a CUDA graph (a capture
  // already invalidated counts: the stream is still in it). Safe from any
  // thread, during any capture.
  virtual cudaError_t stream_capturing(cudaStream_t stream, bool* capturing) = 0;
  // Swaps this thread's stream-capture mode with *mode (cudaThreadExchangeStreamCaptureMode).
  virtual cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) = 0;
  virtual cudaError_t malloc(void** ptr, size_t bytes) = 0;
  virtual cudaError_t free(void* ptr) = 0;
  virtual const char* error_string(cudaError_t error) = 0;
};

std::shared_ptr<CudaApi> real_cuda_api();

// [Capture] This thread in the relaxed capture mode for the scope: a query of
// an event that is not itself captured then leaves alone a capture another
// thread runs in the global mode (the default, torch.cuda.graph's), which
// any query from a thread in that mode would break.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(CudaApi& cuda) : cuda_(cuda) { cuda_.exchange_capture_mode(&mode_); }
  ~RelaxedCapture() { cuda_.exchange_capture_mode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  CudaApi& cuda_;
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace rtd::nccl
