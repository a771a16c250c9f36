// Checks for CUDA and NCCL return codes (STYLE.md 3.3): each throws
// rtd::Error(kBackend) naming what was being done, the code's string and the
// rank; the _WARN twins only log, for destructors and abort paths.
#pragma once

#include <string>

#include "collectives/nccl/cuda_api.h"
#include "collectives/nccl/nccl_api.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"

// The failure is thrown out of line (throw_cuda_error), so that a check on
// the data path adds a compare and a branch, not the message's formatting.
#define RTD_CUDA_CHECK(api, expr, what)                           \
  do {                                                            \
    cudaError_t rtd_cuda_rc_ = (expr);                            \
    if (rtd_cuda_rc_ != cudaSuccess) [[unlikely]]                 \
      ::rtd::nccl::throw_cuda_error((api), rtd_cuda_rc_, (what)); \
  } while (0)

#define RTD_CUDA_CHECK_WARN(api, expr, what)                                                      \
  do {                                                                                            \
    cudaError_t rtd_cuda_rc_ = (expr);                                                            \
    if (rtd_cuda_rc_ != cudaSuccess) {                                                            \
      ::rtd::log::get("nccl")->warn("{}: CUDA error {}", what, (api).error_string(rtd_cuda_rc_)); \
    }                                                                                             \
  } while (0)

namespace rtd::nccl {

// rtd::Error(kBackend): "what: CUDA error <CUDA's string>", the code as the backend's.
[[noreturn]] inline void throw_cuda_error(CudaApi& api, cudaError_t rc, const std::string& what) {
  throw Error(ErrorCategory::kBackend, what + ": CUDA error " + api.error_string(rc),
              static_cast<int>(rc));
}

// The message of an NCCL failure: what, the code's string, NCCL's last error.
inline Error nccl_error(NcclApi& api, ncclComm_t comm, ncclResult_t rc, const std::string& what) {
  std::string detail = api.error_string(rc);
  const char* last = api.last_error(comm);
  if (last && *last) detail += std::string(" (") + last + ")";
  return Error(ErrorCategory::kBackend, what + ": NCCL error: " + detail, static_cast<int>(rc));
}

}  // namespace rtd::nccl
