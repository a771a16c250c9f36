// What dtrun counts on this node for --nproc-per-node=gpu|cpu|auto.
#pragma once

#include <optional>
#include <string>

namespace rtd::launcher {

// GPUs the workers may use: the entries of CUDA_VISIBLE_DEVICES where it is
// set (empty: none), else the NVIDIA device nodes dev_dir/nvidia0, nvidia1, ...
int visible_gpus(const std::optional<std::string>& cuda_visible_devices,
                 const std::string& dev_dir = "/dev");
// CPUs this process may run on (its affinity mask).
int usable_cpus();

}  // namespace rtd::launcher
