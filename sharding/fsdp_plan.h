// The memory plan's check against a GPU (rt_dist/fsdp.h [Memory plan]): used by
// FSDP before it allocates; FSDP::plan itself is public.
#pragma once

#include <string>

#include "rt_dist/fsdp.h"
#include "rt_dist/store.h"

namespace rtd {

// Collective through the store, before anything is allocated: whether
// `plan` fits in GPU `device_index`'s free memory on this rank (within 10%:
// a warning; device_index -1: no GPU to check), its host items in the
// host's available memory and its file (kNvme) in disk_dir's free space. When any rank lacks the
// memory, every rank throws rtd::Error(kConfig) naming those ranks, the sizes, and what to try.
void check_plan_fits(Store& store, const std::string& key, int rank, int size,
                     const FSDPMemoryPlan& plan, int device_index, const std::string& disk_dir);

// The host's available memory (MemAvailable in /proc/meminfo); 0: unknown.
std::size_t host_available_bytes();

}  // namespace rtd
