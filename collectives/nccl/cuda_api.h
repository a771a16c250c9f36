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
  virtual cudaError_t stream_create(cudaStream_t* stream) = 0;
  virtual cudaError_t stream_destroy(cudaStream_t stream) = 0;
  virtual cudaError_t event_create(cudaEvent_t* event) = 0;  // timing disabled
  virtual cudaError_t event_destroy(cudaEvent_t event) = 0;
  virtual cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) = 0;
  // cudaSuccess when complete, cudaErrorNotReady while pending.
  virtual cudaError_t event_query(cudaEvent_t event) = 0;
  virtual cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event) = 0;
  virtual cudaError_t malloc(void** ptr, size_t bytes) = 0;
  virtual cudaError_t free(void* ptr) = 0;
  virtual const char* error_string(cudaError_t error) = 0;
};

std::shared_ptr<CudaApi> real_cuda_api();

}  // namespace rtd::nccl
