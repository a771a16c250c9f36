// What `dtrun doctor` knows about this node: GPUs and their links, the NCCL
// library, network interfaces, RDMA devices, limits and the environment.
// gather_facts() reads them from the system; the checks (checks.h) only
// look at a Facts, so that tests hand them made-up ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/config.h"

namespace rtd::launcher::doctor {

struct GpuFact {
  std::string name;
  std::uint64_t memory_bytes = 0;
  std::string pci;  // "0000:18:00.0"
  int numa_node = -1;
};

// How two GPUs reach each other.
struct GpuLink {
  int a = 0, b = 0;
  int nvlinks = 0;           // active NVLink links between them (or, through NVSwitch, a's)
  std::string path;          // "same PCIe switch", "across CPU sockets", ...
  bool peer_access = false;  // CUDA peer-to-peer reads and writes
  bool nvswitch = false;     // their NVLinks meet in NVSwitches (HGX, DGX), not each other
};

struct NetInterface {
  std::string name;
  std::vector<std::string> addresses;
  bool up = false;
  bool loopback = false;
  std::string pci;  // its PCI device, empty for virtual ones
  int numa_node = -1;
};

struct RdmaPort {
  std::string device;  // "mlx5_0"
  int port = 1;
  std::string state;       // "ACTIVE", "DOWN", ...
  std::string link_layer;  // "InfiniBand" or "Ethernet" (RoCE)
  std::string pci;
};

struct Facts {
  std::string host;
  // GPUs through NVML; gpu_note says why none were read (no driver, ...).
  std::vector<GpuFact> gpus;
  std::string gpu_note;
  std::string driver_version;
  int cuda_driver_version = 0;  // 12080 for CUDA 12.8
  std::string cuda_runtime;     // the CUDA runtime rt_dist was built with ("13.0.88"), or empty
  std::vector<GpuLink> links;
  // The NCCL library the workers would load (its path and version), or why not.
  std::string nccl_path, nccl_version, nccl_note;
  std::vector<NetInterface> interfaces;
  std::vector<RdmaPort> rdma;
  bool have_verbs = false;            // libibverbs.so.1 loads (NCCL's IB transport needs it)
  std::string rdma_source = "sysfs";  // where `rdma` came from: "libibverbs" or "sysfs"
  std::uint64_t shm_bytes = 0;        // 0: no /dev/shm
  std::optional<std::uint64_t> memlock_bytes;  // nullopt: unlimited
  std::uint64_t open_files = 0;
  std::uint64_t hugepages_total = 0, hugepages_free = 0, hugepage_bytes = 0;
  int cpus = 1;
  EnvMap env;  // NCCL_*, RTD_*, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES
};

// The environment variables Facts::env keeps: NCCL_*, RTD_*,
// OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES.
bool is_node_setting(const std::string& key);

// Reads this node's facts. root prefixes /sys and /proc paths (tests).
Facts gather_facts(const EnvMap& env, const std::string& root = "");

// The sysfs-based parts alone, for tests with a made-up tree under root:
// RDMA ports (root/sys/class/infiniband), interfaces' PCI devices and NUMA
// nodes, and huge pages (root/proc/meminfo).
void read_sysfs_facts(const std::string& root, Facts& facts);

}  // namespace rtd::launcher::doctor
