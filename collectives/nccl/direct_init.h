// init_blocking_within: a blocking NCCL communicator created directly
// (ncclCommInitRankConfig with config.blocking = 1), bounded by a deadline
// (NcclSettings::direct_init).
//
// A blocking init cannot be aborted while it runs: no handle exists until it
// returns. So it runs on a thread of its own and the caller waits for it until
// the deadline. Past the deadline the caller fails with a timeout naming what
// it waited for, and the thread is left to finish on its own: if its init ever
// returns, it aborts what it made, since nobody will use it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "collectives/nccl/cuda_api.h"
#include "collectives/nccl/nccl_api.h"

namespace rtd::nccl {

// The new communicator, or throws: rtd::Error kTimeout at the deadline, or
// NCCL's failure (nccl_error) naming `what`. config's netName is copied.
ncclComm_t init_blocking_within(std::shared_ptr<NcclApi> nccl, std::shared_ptr<CudaApi> cuda,
                                int device, int nranks, const ncclUniqueId& id, int rank,
                                ncclConfig_t config, std::chrono::steady_clock::time_point deadline,
                                std::chrono::milliseconds timeout, const std::string& what);

}  // namespace rtd::nccl
