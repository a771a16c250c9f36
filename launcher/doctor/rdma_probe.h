// RDMA devices and their ports through libibverbs (opened with dlopen), as
// NCCL's IB transport will see them.
#pragma once

#include "launcher/doctor/facts.h"

namespace rtd::launcher::doctor {

// Replaces facts.rdma with what libibverbs reports (each device's ports,
// their state and link layer; PCI addresses kept from sysfs) and returns
// true; false, leaving facts alone, where libibverbs.so.1 does not load.
bool probe_rdma_verbs(Facts& facts);

}  // namespace rtd::launcher::doctor
