// The end of a job whose store one of its ranks hosts (under mpirun, under
// srun alone): every rank says it is leaving, and the host keeps its server
// up until all have (or `wait` passed), so that no rank loses the store while
// it still tears its communicators down.
#pragma once

#include <chrono>

#include "rt_dist/store.h"

namespace rtd {

void leave_store(Store& store, bool host, int world_size, const char* key,
                 std::chrono::seconds wait);

}  // namespace rtd
