// Reading a node's facts (facts.h).
#include "launcher/doctor/facts.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher/doctor/gpu_probe.h"
#include "launcher/doctor/rdma_probe.h"
#include "launcher/machine.h"

namespace rtd::launcher::doctor {
namespace fs = std::filesystem;
namespace {

std::string first_line(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

// The PCI device (its sysfs name) and NUMA node behind a sysfs "device" link.
void pci_of(const fs::path& device_link, std::string& pci, int& numa) {
  std::error_code ec;
  const fs::path target = fs::canonical(device_link, ec);
  if (ec) return;
  pci = target.filename().string();
  const std::string node = first_line(target / "numa_node");
  numa = node.empty() ? -1 : std::atoi(node.c_str());
}

std::vector<NetInterface> read_interfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const NetInterface& i) { return i.name == a->ifa_name; });
    if (it == out.end()) {
      out.push_back(NetInterface{.name = a->ifa_name,
                                 .up = (a->ifa_flags & IFF_UP) != 0,
                                 .loopback = (a->ifa_flags & IFF_LOOPBACK) != 0});
      it = out.end() - 1;
    }
    if (!a->ifa_addr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6))
      continue;
    char host[NI_MAXHOST];
    const socklen_t len =
        a->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(a->ifa_addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) == 0)
      it->addresses.push_back(host);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

void read_sysfs_facts(const std::string& root, Facts& facts) {
  std::error_code ec;
  const fs::path ib = fs::path(root + "/sys/class/infiniband");
  for (const auto& dev : fs::directory_iterator(ib, ec)) {
    std::string pci;
    int numa = -1;
    pci_of(dev.path() / "device", pci, numa);
    std::error_code pec;
    for (const auto& port : fs::directory_iterator(dev.path() / "ports", pec)) {
      RdmaPort p{.device = dev.path().filename().string(), .pci = pci};
      p.port = std::atoi(port.path().filename().string().c_str());
      std::string state = first_line(port.path() / "state");  // "4: ACTIVE"
      const auto colon = state.find(": ");
      p.state = colon == std::string::npos ? state : state.substr(colon + 2);
      p.link_layer = first_line(port.path() / "link_layer");
      facts.rdma.push_back(p);
    }
  }
  std::sort(facts.rdma.begin(), facts.rdma.end(), [](const RdmaPort& a, const RdmaPort& b) {
    return std::tie(a.device, a.port) < std::tie(b.device, b.port);
  });
  for (NetInterface& i : facts.interfaces)
    pci_of(fs::path(root + "/sys/class/net") / i.name / "device", i.pci, i.numa_node);
  std::ifstream meminfo(root + "/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::uint64_t value = 0;
    meminfo >> value;
    if (key == "HugePages_Total:") facts.hugepages_total = value;
    if (key == "HugePages_Free:") facts.hugepages_free = value;
    if (key == "Hugepagesize:") facts.hugepage_bytes = value * 1024;
    meminfo.ignore(1 << 10, '\n');
  }
}

bool is_node_setting(const std::string& key) {
  return key.rfind("NCCL_", 0) == 0 || key.rfind("RTD_", 0) == 0 || key == "OMP_NUM_THREADS" ||
         key == "CUDA_VISIBLE_DEVICES";
}

Facts gather_facts(const EnvMap& env, const std::string& root) {
  Facts f;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  f.host = host;
  for (const auto& [k, v] : env)
    if (is_node_setting(k)) f.env[k] = v;
  probe_gpus(f);
  probe_nccl(f);
#ifdef RTD_CUDA_RUNTIME
  f.cuda_runtime = RTD_CUDA_RUNTIME;
#endif
  f.interfaces = read_interfaces();
  read_sysfs_facts(root, f);
  // The ports as NCCL will see them, through libibverbs; sysfs where it is absent.
  f.have_verbs = probe_rdma_verbs(f);
  f.rdma_source = f.have_verbs ? "libibverbs" : "sysfs: libibverbs is not installed";
  struct statvfs shm {};
  if (statvfs("/dev/shm", &shm) == 0) f.shm_bytes = std::uint64_t(shm.f_blocks) * shm.f_frsize;
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    f.memlock_bytes = lim.rlim_cur;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) f.open_files = lim.rlim_cur;
  f.cpus = usable_cpus();
  return f;
}

}  // namespace rtd::launcher::doctor
