// The NCCL unique-id exchange through our Store (docs/nccl.md, "Bootstrap").
#pragma once

#include <chrono>

#include "collectives/join_wait.h"
#include "collectives/nccl/nccl_api.h"
#include "rt_dist/store.h"

namespace rtd::nccl {

// Rank 0 creates the id and publishes it; the others wait for it up to
// wait.timeout, warning while they do (rtd::Error(kTimeout) saying that rank 0
// never joined the communicator when it never publishes).
ncclUniqueId exchange_unique_id(Store& store, NcclApi& api, const JoinWait& wait);

}  // namespace rtd::nccl
