// The NCCL unique-id exchange through our Store (docs/nccl.md, "Bootstrap").
#pragma once

#include <chrono>

#include "collectives/nccl/nccl_api.h"
#include "rt_dist/store.h"

namespace rtd::nccl {

// Rank 0 creates the id and publishes it; the others wait for it up to timeout
// (rtd::Error(kTimeout) naming the key when rank 0 never publishes).
ncclUniqueId exchange_unique_id(Store& store, NcclApi& api, int rank,
                                std::chrono::milliseconds timeout);

}  // namespace rtd::nccl
