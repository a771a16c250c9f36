// The few CUDA driver calls the copy-engine all-reduce needs (stream memory
// operations on flags, an allocation's base) and an event's record and a
// stream's capture status without the runtime's layer, found through the runtime's
// cudaGetDriverEntryPointByVersion so that nothing links libcuda directly.
#pragma once

#include <cuda.h>

#include <string>

namespace rtd::nccl {

struct DriverApi {
  // Empty when every entry point the copy engines need was found; else what
  // is missing (event_record and stream_is_capturing are not among them:
  // null, the runtime's are used).
  std::string missing;
  CUresult (*stream_wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*stream_write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  // A thread's capture mode, which the runtime's call would set only after
  // making its device's primary context current (device 0 on a thread that
  // never chose one: a context more on that GPU).
  CUresult (*thread_exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
  // For a thread with no current context: a stream's own context, made current for one call.
  CUresult (*stream_get_ctx)(CUstream, CUcontext*) = nullptr;
  CUresult (*ctx_push_current)(CUcontext) = nullptr;
  CUresult (*ctx_pop_current)(CUcontext*) = nullptr;
};

// The process-wide id of the allocation that holds ptr (a new one each time
// memory is allocated, even at an address used before); 0 when unknown.
unsigned long long allocation_id(const void* ptr);

// Looked up once per process.
const DriverApi& driver_api();

}  // namespace rtd::nccl
