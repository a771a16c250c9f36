// The real CudaApi: one CUDA runtime call per method.
#include "collectives/nccl/cuda_api.h"

namespace rtd::nccl {
namespace {

class RealCudaApi : public CudaApi {
 public:
  cudaError_t get_device_count(int* count) override { return cudaGetDeviceCount(count); }
  cudaError_t set_device(int device) override { return cudaSetDevice(device); }
  cudaError_t stream_create(cudaStream_t* stream) override {
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
  cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) override {
    return cudaEventRecord(event, stream);
  }
  cudaError_t event_query(cudaEvent_t event) override { return cudaEventQuery(event); }
  cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event) override {
    return cudaStreamWaitEvent(stream, event, 0);
  }
  cudaError_t malloc(void** ptr, size_t bytes) override { return cudaMalloc(ptr, bytes); }
  cudaError_t free(void* ptr) override { return cudaFree(ptr); }
  const char* error_string(cudaError_t error) override { return cudaGetErrorString(error); }
};

}  // namespace

std::shared_ptr<CudaApi> real_cuda_api() {
  static auto api = std::make_shared<RealCudaApi>();
  return api;
}

}  // namespace rtd::nccl
