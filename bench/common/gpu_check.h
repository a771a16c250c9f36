// Error checks for the GPU benchmarks: a failed CUDA or NCCL call throws with
// what was being done (benchmarks report and exit; they never assert).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace rtd::bench {

inline void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(rc));
}

inline void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess)
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(rc));
}

}  // namespace rtd::bench
