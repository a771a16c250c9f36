// dtrun doctor's checks on made-up machines: a container without shared
// memory, RDMA without libibverbs or memlock, NCCL_SOCKET_IFNAME that
// matches nothing, more workers than GPUs, GPUs without peer access; and the
// sysfs reader on a made-up tree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "launcher/doctor/checks.h"
#include "launcher/doctor/facts.h"

namespace rtd::launcher::doctor {
namespace {

namespace fs = std::filesystem;

// A healthy 8-GPU node with two InfiniBand ports.
Facts healthy() {
  Facts f;
  f.host = "node0";
  for (int i = 0; i < 8; ++i)
    f.gpus.push_back({"NVIDIA H200", 150ull << 30, "0000:1" + std::to_string(i) + ":00.0", i / 4});
  f.driver_version = "580.159.04";
  f.cuda_driver_version = 13000;
  f.links.push_back({0, 1, 18, "on one board", true});
  f.nccl_path = "/usr/lib/libnccl.so.2";
  f.nccl_version = "2.28.3";
  f.interfaces = {{"lo", {"127.0.0.1"}, true, true},
                  {"eth0", {"10.0.0.5"}, true, false},
                  {"ib0", {"192.168.1.5"}, true, false},
                  {"docker0", {"172.17.0.1"}, true, false}};
  f.rdma = {{"mlx5_0", 1, "ACTIVE", "InfiniBand", "0000:10:01.0"},
            {"mlx5_1", 1, "ACTIVE", "InfiniBand", "0000:50:01.0"}};
  f.have_verbs = true;
  f.shm_bytes = 64ull << 30;
  f.open_files = 1 << 20;
  f.cpus = 96;
  return f;
}

const Finding& find(const std::vector<Finding>& all, const std::string& check) {
  for (const Finding& f : all)
    if (f.check == check) return f;
  static Finding none{"(missing)", Status::kError, "", ""};
  ADD_FAILURE() << "no finding for " << check;
  return none;
}

bool any_error(const std::vector<Finding>& all) {
  for (const Finding& f : all)
    if (f.status == Status::kError) return true;
  return false;
}

// An HGX/DGX node: every NVLink ends in an NVSwitch, none at the peer GPU.
// It reads as NVLink (it read as "PCIe through the host bridge"), and the
// bandwidth expected of it follows from its 18 links.
TEST(Doctor, NVLinkThroughNVSwitchIsRecognized) {
  Facts f = healthy();
  f.links = {{0, 1, 18, "through the CPU's PCIe host bridge", true, true}};
  const auto all = evaluate(f, {.nproc_per_node = 8, .nnodes = 1});
  EXPECT_NE(find(all, "GPU link").found.find("18 NVLink links through NVSwitch, peer access"),
            std::string::npos)
      << find(all, "GPU link").found;
  EXPECT_EQ(expected_busbw_within(f.links, f.gpus.size()), 180.0);
  f.links = {{0, 1, 0, "through the CPU's PCIe host bridge", true, false}};
  EXPECT_EQ(expected_busbw_within(f.links, f.gpus.size()), 10.0);
  f.links[0].peer_access = false;
  EXPECT_EQ(expected_busbw_within(f.links, f.gpus.size()), 3.0);
  EXPECT_EQ(expected_busbw_within({}, 0), 0.0);
}

TEST(Doctor, AHealthyNodeHasNoErrorAndNamesWhatItFound) {
  const auto all = evaluate(healthy(), {.nproc_per_node = 8, .nnodes = 2});
  EXPECT_FALSE(any_error(all));
  EXPECT_EQ(find(all, "GPUs").found, "8 x NVIDIA H200, 150.0 GiB");
  EXPECT_EQ(find(all, "driver").found, "580.159.04, CUDA 13.0");
  EXPECT_NE(find(all, "GPU link").found.find("18 NVLink links, peer access"), std::string::npos);
  EXPECT_NE(find(all, "NCCL socket interface").found.find("ib0"), std::string::npos);
  EXPECT_EQ(find(all, "RDMA").status, Status::kOk);
}

TEST(Doctor, AContainerWithoutSharedMemoryOrMemlockIsAnErrorWithAdvice) {
  Facts f = healthy();
  f.shm_bytes = 64ull << 20;  // docker's default
  f.memlock_bytes = 64ull << 10;
  const auto all = evaluate(f, {.nproc_per_node = 8});
  EXPECT_EQ(find(all, "/dev/shm").status, Status::kError);
  EXPECT_NE(find(all, "/dev/shm").advice.find("--shm-size"), std::string::npos);
  EXPECT_EQ(find(all, "memlock (ulimit -l)").status, Status::kError);
  EXPECT_NE(find(all, "memlock (ulimit -l)").advice.find("memlock=-1"), std::string::npos);
  f.rdma.clear();  // without RDMA a memlock limit does not matter
  EXPECT_EQ(find(evaluate(f, {.nproc_per_node = 8}), "memlock (ulimit -l)").status, Status::kInfo);
}

TEST(Doctor, RdmaWithoutVerbsOrWithIbDisabledOrNoActivePort) {
  Facts f = healthy();
  f.have_verbs = false;
  f.rdma_source = "sysfs: libibverbs is not installed";
  const Finding r0 = find(evaluate(f, {}), "RDMA");
  EXPECT_EQ(r0.status, Status::kError);
  EXPECT_NE(r0.found.find("(sysfs: libibverbs is not installed)"), std::string::npos) << r0.found;
  f.rdma.clear();  // no devices: where the answer came from is said
  EXPECT_NE(find(evaluate(f, {}), "RDMA").found.find("no devices (sysfs: libibverbs is not"),
            std::string::npos);
  f = healthy();
  f.env["NCCL_IB_DISABLE"] = "1";
  EXPECT_EQ(find(evaluate(f, {}), "RDMA").status, Status::kWarn);
  f = healthy();
  for (auto& p : f.rdma) p.state = "DOWN";
  const Finding r = find(evaluate(f, {}), "RDMA");
  EXPECT_EQ(r.status, Status::kWarn);
  EXPECT_NE(r.advice.find("ACTIVE"), std::string::npos);
}

TEST(Doctor, WhichInterfaceNcclWouldUse) {
  Facts f = healthy();
  std::string why;
  EXPECT_EQ(nccl_socket_interfaces(f, &why), std::vector<std::string>{"ib0"});
  f.interfaces.erase(f.interfaces.begin() + 2);  // no ib0: anything but lo and docker*
  EXPECT_EQ(nccl_socket_interfaces(f, &why), std::vector<std::string>{"eth0"});
  f.env["NCCL_SOCKET_IFNAME"] = "^eth,lo";
  EXPECT_EQ(nccl_socket_interfaces(f, &why), std::vector<std::string>{"docker0"});
  f.env["NCCL_SOCKET_IFNAME"] = "=eth";  // exact: eth0 is not "eth"
  EXPECT_TRUE(nccl_socket_interfaces(f, &why).empty());
  const Finding n = find(evaluate(f, {.nnodes = 2}), "NCCL socket interface");
  EXPECT_EQ(n.status, Status::kError);
  EXPECT_NE(n.found.find("NCCL_SOCKET_IFNAME==eth"), std::string::npos) << n.found;
  f.env.erase("NCCL_SOCKET_IFNAME");
  f.interfaces = {{"lo", {"127.0.0.1"}, true, true}};
  EXPECT_EQ(find(evaluate(f, {.nnodes = 1}), "NCCL socket interface").status, Status::kOk);
  EXPECT_EQ(find(evaluate(f, {.nnodes = 2}), "NCCL socket interface").status, Status::kError);
}

TEST(Doctor, ADriverOlderThanTheCudaRuntimeIsAnError) {
  Facts f = healthy();
  f.cuda_runtime = "13.0.88";
  EXPECT_EQ(find(evaluate(f, {}), "driver").status, Status::kOk);
  EXPECT_NE(find(evaluate(f, {}), "driver").found.find("rt_dist's CUDA runtime 13.0.88"),
            std::string::npos);
  f.cuda_driver_version = 12080;  // the driver supports CUDA 12.8 only
  const Finding d = find(evaluate(f, {}), "driver");
  EXPECT_EQ(d.status, Status::kError);
  EXPECT_NE(d.advice.find("update the NVIDIA driver"), std::string::npos);
}

TEST(Doctor, MoreWorkersThanVisibleGpusAndNoPeerAccess) {
  Facts f = healthy();
  f.env["CUDA_VISIBLE_DEVICES"] = "0,1";
  const Finding g = find(evaluate(f, {.nproc_per_node = 4}), "GPUs");
  EXPECT_EQ(g.status, Status::kError);
  EXPECT_NE(g.found.find("2 visible"), std::string::npos);
  f.links[0].peer_access = false;
  f.links[0].nvlinks = 0;
  f.links[0].path = "across CPU sockets (the CPU interconnect)";
  EXPECT_EQ(find(evaluate(f, {}), "GPU link").status, Status::kWarn);
  f = healthy();
  f.nccl_version.clear();
  f.nccl_note = "libnccl.so.2 does not load";
  EXPECT_EQ(find(evaluate(f, {}), "NCCL").status, Status::kError);
}

TEST(Doctor, ReadsRdmaPortsInterfacesAndHugePagesFromSysfs) {
  const fs::path root = fs::temp_directory_path() / ("rtd_doctor_" + std::to_string(getpid()));
  fs::remove_all(root);
  auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };
  const fs::path pci = root / "sys/devices/pci0000:00/0000:3b:00.0";
  write(pci / "numa_node", "1\n");
  write(root / "sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  write(root / "sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet\n");
  fs::create_directory_symlink(pci, root / "sys/class/infiniband/mlx5_0/device");
  fs::create_directories(root / "sys/class/net/eth0");
  fs::create_directory_symlink(pci, root / "sys/class/net/eth0/device");
  write(root / "proc/meminfo",
        "MemTotal: 100 kB\nHugePages_Total:      16\nHugePages_Free:        4\n"
        "Hugepagesize:       2048 kB\n");
  Facts f;
  f.interfaces = {{"eth0", {"10.0.0.1"}, true, false}, {"lo", {"127.0.0.1"}, true, true}};
  read_sysfs_facts(root.string(), f);
  ASSERT_EQ(f.rdma.size(), 1u);
  EXPECT_EQ(f.rdma[0].device, "mlx5_0");
  EXPECT_EQ(f.rdma[0].state, "ACTIVE");
  EXPECT_EQ(f.rdma[0].link_layer, "Ethernet");
  EXPECT_EQ(f.rdma[0].pci, "0000:3b:00.0");
  EXPECT_EQ(f.interfaces[0].pci, "0000:3b:00.0");
  EXPECT_EQ(f.interfaces[0].numa_node, 1);
  EXPECT_EQ(f.interfaces[1].pci, "");
  EXPECT_EQ(f.hugepages_total, 16u);
  EXPECT_EQ(f.hugepages_free, 4u);
  EXPECT_EQ(f.hugepage_bytes, 2048u * 1024);
  fs::remove_all(root);
}

}  // namespace
}  // namespace rtd::launcher::doctor
