// Driver entry points through the runtime, looked up once.
#include "collectives/nccl/driver_api.h"

#include <cuda_runtime_api.h>

namespace rtd::nccl {
namespace {

// The ABI version of the entry points below (CUDA 12.0: the _v2 stream memops).
constexpr unsigned kDriverAbi = 12000;

template <typename Fn>
void find(const char* symbol, Fn* fn, std::string* missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, kDriverAbi, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess || p == nullptr) {
    *missing += (missing->empty() ? "" : ", ") + std::string(symbol);
    return;
  }
  *fn = reinterpret_cast<Fn>(p);
}

DriverApi load() {
  DriverApi api;
  find("cuStreamWaitValue32", &api.stream_wait_value32, &api.missing);
  find("cuStreamWriteValue32", &api.stream_write_value32, &api.missing);
  find("cuMemGetAddressRange", &api.mem_get_address_range, &api.missing);
  find("cuPointerGetAttribute", &api.pointer_get_attribute, &api.missing);
  std::string optional;  // without these, CudaApi asks the runtime
  find("cuEventRecord", &api.event_record, &optional);
  find("cuStreamIsCapturing", &api.stream_is_capturing, &optional);
  find("cuThreadExchangeStreamCaptureMode", &api.thread_exchange_capture_mode, &optional);
  find("cuStreamGetCtx", &api.stream_get_ctx, &optional);
  find("cuCtxPushCurrent", &api.ctx_push_current, &optional);
  find("cuCtxPopCurrent", &api.ctx_pop_current, &optional);
  return api;
}

}  // namespace

const DriverApi& driver_api() {
  static const DriverApi api = load();
  return api;
}

unsigned long long allocation_id(const void* ptr) {
  const DriverApi& api = driver_api();
  unsigned long long id = 0;
  if (!api.pointer_get_attribute ||
      api.pointer_get_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return 0;
  }
  return id;
}

}  // namespace rtd::nccl
