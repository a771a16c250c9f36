// The few CUDA driver calls the copy-engine all-reduce needs (stream memory
// operations on flags, an allocation's base), found through the runtime's
// cudaGetDriverEntryPointByVersion so that nothing links libcuda directly.
#pragma once

#include <cuda.h>

#include <string>

namespace rtd::nccl {

struct DriverApi {
  // Empty when every entry point was found; else what is missing.
  std::string missing;
  CUresult (*stream_wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*stream_write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
};

// Looked up once per process.
const DriverApi& driver_api();

}  // namespace rtd::nccl
