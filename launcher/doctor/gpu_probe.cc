// NVML and NCCL through dlopen (gpu_probe.h). The few NVML types used are
// declared here as nvml.h defines them (their layout is NVML's stable ABI).
#include "launcher/doctor/gpu_probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <fstream>

namespace rtd::launcher::doctor {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlPciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
// nvmlGpuTopologyLevel_t
const char* topology_text(int level) {
  switch (level) {
    case 0:
      return "on one board";
    case 10:
      return "through one PCIe switch";
    case 20:
      return "through several PCIe switches";
    case 30:
      return "through the CPU's PCIe host bridge";
    case 40:
      return "across host bridges of one NUMA node";
    case 50:
      return "across CPU sockets (the CPU interconnect)";
    default:
      return "by an unknown path";
  }
}

// "00000000:18:00.0" -> "0000:18:00.0", as sysfs names PCI devices.
std::string sysfs_pci(const char* nvml_bus_id) {
  std::string id(nvml_bus_id);
  if (id.size() > 12) id = id.substr(id.size() - 12);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  return id;
}

int numa_node_of(const std::string& pci) {
  std::ifstream f("/sys/bus/pci/devices/" + pci + "/numa_node");
  int node = -1;
  return (f >> node) ? node : -1;
}

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

// nvmlGpuP2PCapsIndex_t's NVML_P2P_CAPS_INDEX_NVLINK: "do they talk over NVLink".
constexpr int kP2pCapsNvlink = 2;

void probe_gpus(Facts& facts) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    facts.gpu_note = "NVML (libnvidia-ml.so.1, part of the NVIDIA driver) is not installed";
    return;
  }
  auto init = symbol<nvmlReturn_t (*)()>(lib, "nvmlInit_v2");
  auto shutdown = symbol<nvmlReturn_t (*)()>(lib, "nvmlShutdown");
  auto count_fn = symbol<nvmlReturn_t (*)(unsigned*)>(lib, "nvmlDeviceGetCount_v2");
  auto handle =
      symbol<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto name = symbol<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(lib, "nvmlDeviceGetName");
  auto memory = symbol<nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*)>(lib, "nvmlDeviceGetMemoryInfo");
  auto pci = symbol<nvmlReturn_t (*)(nvmlDevice_t, NvmlPciInfo*)>(lib, "nvmlDeviceGetPciInfo_v3");
  auto driver = symbol<nvmlReturn_t (*)(char*, unsigned)>(lib, "nvmlSystemGetDriverVersion");
  auto cuda = symbol<nvmlReturn_t (*)(int*)>(lib, "nvmlSystemGetCudaDriverVersion_v2");
  auto ancestor = symbol<nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int*)>(
      lib, "nvmlDeviceGetTopologyCommonAncestor");
  auto p2p = symbol<nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int, int*)>(
      lib, "nvmlDeviceGetP2PStatus");
  auto link_state =
      symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*)>(lib, "nvmlDeviceGetNvLinkState");
  auto link_remote = symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned, NvmlPciInfo*)>(
      lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  unsigned count = 0;
  if (!init || !count_fn || !handle || init() != kNvmlSuccess || count_fn(&count) != kNvmlSuccess) {
    facts.gpu_note = "NVML is installed but does not start (is the NVIDIA driver loaded?)";
    dlclose(lib);
    return;
  }
  char text[96] = {};
  if (driver && driver(text, sizeof(text)) == kNvmlSuccess) facts.driver_version = text;
  if (cuda) cuda(&facts.cuda_driver_version);
  std::vector<nvmlDevice_t> devices;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t d = nullptr;
    if (handle(i, &d) != kNvmlSuccess) continue;
    GpuFact g;
    if (name && name(d, text, sizeof(text)) == kNvmlSuccess) g.name = text;
    NvmlMemory m{};
    if (memory && memory(d, &m) == kNvmlSuccess) g.memory_bytes = m.total;
    NvmlPciInfo info{};
    if (pci && pci(d, &info) == kNvmlSuccess) {
      g.pci = sysfs_pci(info.bus_id);
      g.numa_node = numa_node_of(g.pci);
    }
    devices.push_back(d);
    facts.gpus.push_back(g);
  }
  for (std::size_t a = 0; a < devices.size(); ++a) {
    for (std::size_t b = a + 1; b < devices.size(); ++b) {
      GpuLink link{static_cast<int>(a), static_cast<int>(b)};
      int level = -1;
      if (ancestor && ancestor(devices[a], devices[b], &level) == kNvmlSuccess)
        link.path = topology_text(level);
      int read = 1, write = 1;  // NVML_P2P_STATUS_OK is 0
      if (p2p && p2p(devices[a], devices[b], 0, &read) == kNvmlSuccess &&
          p2p(devices[a], devices[b], 1, &write) == kNvmlSuccess)
        link.peer_access = read == 0 && write == 0;
      int active_links = 0;
      for (unsigned l = 0; link_state && link_remote && l < 18; ++l) {
        int active = 0;
        NvmlPciInfo remote{};
        if (link_state(devices[a], l, &active) != kNvmlSuccess) break;
        active_links += active ? 1 : 0;
        if (active && link_remote(devices[a], l, &remote) == kNvmlSuccess &&
            sysfs_pci(remote.bus_id) == facts.gpus[b].pci)
          ++link.nvlinks;
      }
      // No link ends at b, yet NVML says they talk over NVLink: the links
      // meet in NVSwitches (a link's remote device is the switch), and all
      // of a's active links carry the traffic.
      int over_nvlink = 1;
      if (link.nvlinks == 0 && p2p &&
          p2p(devices[a], devices[b], kP2pCapsNvlink, &over_nvlink) == kNvmlSuccess &&
          over_nvlink == 0 && active_links > 0) {
        link.nvswitch = true;
        link.nvlinks = active_links;
      }
      facts.links.push_back(link);
    }
  }
  if (shutdown) shutdown();
  dlclose(lib);
}

void probe_nccl(Facts& facts) {
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    facts.nccl_note = std::string("libnccl.so.2 does not load: ") + dlerror();
    return;
  }
  auto version = symbol<int (*)(int*)>(lib, "ncclGetVersion");
  int code = 0;
  if (version && version(&code) == 0) {
    // 22803 -> 2.28.3 (NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9)
    facts.nccl_version = std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) +
                         "." + std::to_string(code % 100);
  }
  Dl_info where{};
  if (version && dladdr(reinterpret_cast<void*>(version), &where) && where.dli_fname)
    facts.nccl_path = where.dli_fname;
  dlclose(lib);
}

}  // namespace rtd::launcher::doctor
