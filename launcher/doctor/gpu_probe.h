// The GPU side of `dtrun doctor`, through the libraries a GPU job loads
// anyway, opened with dlopen so that dtrun needs none of them: NVML
// (libnvidia-ml.so.1) for the GPUs, their memory, PCI addresses, NVLink
// links, peer access and the driver; libnccl.so.2 for its version.
#pragma once

#include "launcher/doctor/facts.h"

namespace rtd::launcher::doctor {

// Fills gpus, links, driver_version, cuda_driver_version (or gpu_note).
void probe_gpus(Facts& facts);
// Fills nccl_path and nccl_version (or nccl_note), as the workers would find it.
void probe_nccl(Facts& facts);

}  // namespace rtd::launcher::doctor
