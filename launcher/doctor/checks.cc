// The doctor's checks (checks.h).
#include "launcher/doctor/checks.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "launcher/machine.h"

namespace rtd::launcher::doctor {
namespace {

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string env_or(const Facts& f, const std::string& key, const std::string& fallback = "") {
  auto it = f.env.find(key);
  return it == f.env.end() ? fallback : it->second;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep = ", ") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

// Visible GPUs: CUDA_VISIBLE_DEVICES' entries, as dtrun counts them, where set; else all.
int visible(const Facts& f) {
  auto it = f.env.find("CUDA_VISIBLE_DEVICES");
  if (it == f.env.end()) return static_cast<int>(f.gpus.size());
  return std::min(visible_gpus(it->second), static_cast<int>(f.gpus.size()));
}

}  // namespace

double expected_busbw_within(const std::vector<GpuLink>& links, std::size_t gpus) {
  if (gpus == 0) return 0;
  double expect = 3;
  for (const GpuLink& l : links)
    expect = std::max(expect, l.nvlinks > 0 ? 10.0 * l.nvlinks : l.peer_access ? 10.0 : 3.0);
  return expect;
}

namespace {

void gpu_findings(const Facts& f, const JobShape& job, std::vector<Finding>& out) {
  const int n = visible(f);
  if (f.gpus.empty()) {
    out.push_back({"GPUs", Status::kInfo,
                   "none" + (f.gpu_note.empty() ? std::string() : " (" + f.gpu_note + ")") +
                       ": workers run on the CPU with Gloo",
                   ""});
  } else {
    std::map<std::string, int> models;
    for (const auto& g : f.gpus) ++models[g.name + ", " + gib(g.memory_bytes)];
    std::vector<std::string> parts;
    for (const auto& [m, c] : models) parts.push_back(std::to_string(c) + " x " + m);
    std::string found = join(parts);
    if (n != static_cast<int>(f.gpus.size()))
      found += "; " + std::to_string(n) + " visible (CUDA_VISIBLE_DEVICES)";
    if (job.nproc_per_node > n) {
      out.push_back({"GPUs", Status::kError, found,
                     "--nproc-per-node=" + std::to_string(job.nproc_per_node) +
                         " asks for more "
                         "workers than the " +
                         std::to_string(n) +
                         " visible GPUs: use "
                         "--nproc-per-node=gpu, or fewer"});
    } else {
      out.push_back({"GPUs", Status::kOk, found, ""});
    }
    char cuda[32] = "";
    if (f.cuda_driver_version > 0)
      std::snprintf(cuda, sizeof(cuda), ", CUDA %d.%d", f.cuda_driver_version / 1000,
                    f.cuda_driver_version % 1000 / 10);
    // The driver must support the CUDA runtime rt_dist carries (major.minor).
    std::string driver = f.driver_version + cuda;
    int major = 0, minor = 0;
    if (!f.cuda_runtime.empty() &&
        std::sscanf(f.cuda_runtime.c_str(), "%d.%d", &major, &minor) == 2) {
      driver += "; rt_dist's CUDA runtime " + f.cuda_runtime;
    }
    if (f.cuda_driver_version > 0 && f.cuda_driver_version < major * 1000 + minor * 10) {
      out.push_back({"driver", Status::kError, driver,
                     "the driver is older than the CUDA runtime rt_dist was built with: update "
                     "the NVIDIA driver, or build rt_dist with an older CUDA toolkit"});
    } else {
      out.push_back({"driver", Status::kOk, driver, ""});
    }
  }
  if (!f.nccl_version.empty()) {
    out.push_back({"NCCL", Status::kOk, f.nccl_version + " (" + f.nccl_path + ")", ""});
  } else if (!f.gpus.empty()) {
    out.push_back({"NCCL", Status::kError, f.nccl_note,
                   "the workers need NCCL on GPUs: install libnccl2 (or NCCL from NVIDIA's "
                   "CUDA image) or add its directory to LD_LIBRARY_PATH"});
  } else {
    out.push_back({"NCCL", Status::kInfo, "not found (not needed without GPUs)", ""});
  }
  for (const GpuLink& l : f.links) {
    std::string found = "GPU" + std::to_string(l.a) + " - GPU" + std::to_string(l.b) + ": " +
                        (l.nvlinks > 0 ? std::to_string(l.nvlinks) + " NVLink links" +
                                             (l.nvswitch ? " through NVSwitch" : "")
                                       : "PCIe " + l.path) +
                        (l.peer_access ? ", peer access" : ", no peer access");
    if (!l.peer_access) {
      out.push_back({"GPU link", Status::kWarn, found,
                     "without peer access NCCL copies between these GPUs through host memory "
                     "(several times slower); check the IOMMU / PCIe ACS settings or the "
                     "container's device list"});
    } else {
      out.push_back({"GPU link", Status::kOk, found, ""});
    }
  }
  // Each GPU's NUMA node and the RDMA devices (else interfaces) on it.
  for (std::size_t g = 0; g < f.gpus.size() && f.gpus[g].numa_node >= 0; ++g) {
    std::vector<std::string> near;
    for (const RdmaPort& p : f.rdma) {
      if (!p.pci.empty() && p.pci.substr(0, 7) == f.gpus[g].pci.substr(0, 7))
        near.push_back(p.device + " (same PCIe root)");
    }
    for (const NetInterface& i : f.interfaces)
      if (!i.loopback && i.numa_node == f.gpus[g].numa_node) near.push_back(i.name);
    out.push_back({"GPU-NIC affinity", Status::kInfo,
                   "GPU" + std::to_string(g) + " on NUMA node " +
                       std::to_string(f.gpus[g].numa_node) +
                       ", near: " + (near.empty() ? "no NIC on that node" : join(near)),
                   ""});
  }
}

void network_findings(const Facts& f, const JobShape& job, std::vector<Finding>& out) {
  std::vector<std::string> up;
  for (const NetInterface& i : f.interfaces)
    if (i.up && !i.addresses.empty()) up.push_back(i.name + " " + join(i.addresses, " "));
  out.push_back({"interfaces", up.empty() ? Status::kError : Status::kInfo,
                 up.empty() ? "none up with an address" : join(up, "; "),
                 up.empty() ? "bring up a network interface" : ""});
  std::string why;
  const auto chosen = nccl_socket_interfaces(f, &why);
  const bool only_lo = !chosen.empty() && std::all_of(chosen.begin(), chosen.end(), [&](auto& n) {
    return std::any_of(f.interfaces.begin(), f.interfaces.end(),
                       [&](auto& i) { return i.name == n && i.loopback; });
  });
  if (chosen.empty()) {
    out.push_back({"NCCL socket interface", Status::kError, "none (" + why + ")",
                   "set NCCL_SOCKET_IFNAME to an interface that is up (ip -brief address), "
                   "or --nccl-preset for the fabric"});
  } else if (only_lo && job.nnodes > 1) {
    out.push_back({"NCCL socket interface", Status::kError, join(chosen) + " (" + why + ")",
                   "other nodes cannot reach the loopback: set NCCL_SOCKET_IFNAME to the "
                   "interface that reaches them"});
  } else {
    out.push_back({"NCCL socket interface", Status::kOk, join(chosen) + " (" + why + ")", ""});
  }
  if (f.rdma.empty()) {
    out.push_back({"RDMA", Status::kInfo,
                   "no devices (" + f.rdma_source + "): between nodes NCCL uses TCP sockets",
                   job.nnodes > 1 ? "expect 1-10 GB/s between nodes; InfiniBand or RoCE gives "
                                    "25-50 GB/s per NIC"
                                  : ""});
    return;
  }
  std::vector<std::string> ports;
  int active = 0;
  for (const RdmaPort& p : f.rdma) {
    ports.push_back(p.device + ":" + std::to_string(p.port) + " " + p.state + " " + p.link_layer);
    active += p.state == "ACTIVE";
  }
  Status s = Status::kOk;
  std::string advice;
  if (!f.have_verbs) {
    s = Status::kError;
    advice =
        "libibverbs.so.1 does not load, so NCCL cannot use these devices: install "
        "rdma-core / libibverbs1 (in the container too)";
  } else if (active == 0) {
    s = Status::kWarn;
    advice = "no port is ACTIVE: check the cable and the subnet manager (ibstat)";
  } else if (env_or(f, "NCCL_IB_DISABLE") == "1") {
    s = Status::kWarn;
    advice = "NCCL_IB_DISABLE=1 turns these devices off for NCCL: unset it";
  }
  out.push_back({"RDMA", s, join(ports, "; ") + " (" + f.rdma_source + ")", advice});
}

void limit_findings(const Facts& f, const JobShape& job, std::vector<Finding>& out) {
  constexpr std::uint64_t kShmNeeded = 1ull << 30;
  if (f.shm_bytes < kShmNeeded) {
    out.push_back({"/dev/shm", job.nproc_per_node > 1 ? Status::kError : Status::kWarn,
                   f.shm_bytes == 0 ? "missing" : mib(f.shm_bytes),
                   "NCCL's shared-memory transport and the workers need more: docker run "
                   "--shm-size=16g (or --ipc=host); Kubernetes: an emptyDir of medium Memory "
                   "at /dev/shm"});
  } else {
    out.push_back({"/dev/shm", Status::kOk, gib(f.shm_bytes), ""});
  }
  const bool rdma = !f.rdma.empty();
  if (!f.memlock_bytes) {
    out.push_back({"memlock (ulimit -l)", Status::kOk, "unlimited", ""});
  } else {
    out.push_back({"memlock (ulimit -l)", rdma ? Status::kError : Status::kInfo,
                   mib(*f.memlock_bytes),
                   rdma ? "RDMA registers (locks) the buffers it sends: ulimit -l unlimited "
                          "(docker: --ulimit memlock=-1; Slurm: PropagateResourceLimits)"
                        : ""});
  }
  out.push_back(
      {"open files (ulimit -n)", f.open_files < 4096 ? Status::kWarn : Status::kOk,
       std::to_string(f.open_files),
       f.open_files < 4096 ? "NCCL and the store open many sockets: ulimit -n 65536" : ""});
  out.push_back({"huge pages", Status::kInfo,
                 std::to_string(f.hugepages_total) + " of " + mib(f.hugepage_bytes) + ", " +
                     std::to_string(f.hugepages_free) + " free",
                 ""});
  const std::string omp = env_or(f, "OMP_NUM_THREADS");
  // Unset: dtrun sets 1 for several workers a node; a node's only worker
  // keeps every CPU, which cannot oversubscribe them.
  const int threads = omp.empty() ? 1 : std::max(1, std::atoi(omp.c_str()));
  const int wanted = job.nproc_per_node * threads;
  std::string found = std::to_string(f.cpus) + " CPUs usable, " +
                      std::to_string(job.nproc_per_node) + " workers x OMP_NUM_THREADS=" +
                      (!omp.empty()             ? omp
                       : job.nproc_per_node > 1 ? "unset (dtrun sets 1)"
                                                : "unset (every CPU)");
  if (wanted > f.cpus) {
    out.push_back({"CPUs", Status::kWarn, found,
                   threads > 1 && job.nproc_per_node <= f.cpus
                       ? "more threads than CPUs slow every worker: lower OMP_NUM_THREADS to " +
                             std::to_string(std::max(1, f.cpus / job.nproc_per_node))
                       : "more workers than CPUs: they will take turns on the CPUs (run fewer "
                         "per node, or give the job more CPUs)"});
  } else {
    out.push_back({"CPUs", Status::kOk, found, ""});
  }
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kInfo:
      return "info";
    case Status::kWarn:
      return "warn";
    case Status::kError:
      return "ERROR";
  }
  return "?";
}

std::vector<std::string> nccl_socket_interfaces(const Facts& f, std::string* why) {
  std::vector<const NetInterface*> usable;
  for (const NetInterface& i : f.interfaces)
    if (i.up && !i.addresses.empty()) usable.push_back(&i);
  std::vector<std::string> out;
  auto pick = [&](auto&& keep) {
    for (const NetInterface* i : usable)
      if (keep(*i)) out.push_back(i->name);
  };
  const std::string spec = env_or(f, "NCCL_SOCKET_IFNAME");
  if (!spec.empty()) {
    std::string list = spec;
    const bool exclude = list[0] == '^';
    if (exclude) list = list.substr(1);
    const bool exact = !list.empty() && list[0] == '=';
    if (exact) list = list.substr(1);
    const auto items = split(list, ',');
    auto matches = [&](const std::string& name) {
      return std::any_of(items.begin(), items.end(), [&](const std::string& p) {
        return exact ? name == p : name.rfind(p, 0) == 0;
      });
    };
    pick([&](const NetInterface& i) { return matches(i.name) != exclude; });
    *why = "NCCL_SOCKET_IFNAME=" + spec;
    return out;
  }
  pick([](const NetInterface& i) { return i.name.rfind("ib", 0) == 0; });
  if (!out.empty()) {
    *why = "NCCL_SOCKET_IFNAME unset: NCCL prefers ib* interfaces";
    return out;
  }
  pick([](const NetInterface& i) { return !i.loopback && i.name.rfind("docker", 0) != 0; });
  if (!out.empty()) {
    *why = "NCCL_SOCKET_IFNAME unset: any interface but lo and docker*";
    return out;
  }
  pick([](const NetInterface& i) { return i.loopback; });
  *why = "NCCL_SOCKET_IFNAME unset: only the loopback is up";
  return out;
}

std::vector<Finding> evaluate(const Facts& facts, const JobShape& job) {
  std::vector<Finding> out;
  gpu_findings(facts, job, out);
  network_findings(facts, job, out);
  limit_findings(facts, job, out);
  return out;
}

}  // namespace rtd::launcher::doctor
