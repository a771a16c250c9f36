// libibverbs through dlopen (rdma_probe.h). The port attributes are read
// with the library's exported ibv_query_port, into the leading fields of
// struct ibv_port_attr as verbs.h lays them out (its stable ABI).
#include "launcher/doctor/rdma_probe.h"

#include <dlfcn.h>

#include <cstdint>
#include <string>

namespace rtd::launcher::doctor {
namespace {

struct PortAttr {  // struct ibv_port_attr's stable prefix, room for the rest
  int state, max_mtu, active_mtu, gid_tbl_len;
  std::uint32_t port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr;
  std::uint16_t pkey_tbl_len, lid, sm_lid;
  std::uint8_t lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed,
      phys_state, link_layer, flags;
  std::uint8_t rest[64];
};

const char* state_name(int s) {  // enum ibv_port_state
  switch (s) {
    case 1:
      return "DOWN";
    case 2:
      return "INIT";
    case 3:
      return "ARMED";
    case 4:
      return "ACTIVE";
    case 5:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}

const char* link_layer_name(int l) {  // IBV_LINK_LAYER_*
  return l == 2 ? "Ethernet" : "InfiniBand";
}

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

bool probe_rdma_verbs(Facts& facts) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  auto list = symbol<void** (*)(int*)>(lib, "ibv_get_device_list");
  auto free_list = symbol<void (*)(void**)>(lib, "ibv_free_device_list");
  auto name = symbol<const char* (*)(void*)>(lib, "ibv_get_device_name");
  auto open = symbol<void* (*)(void*)>(lib, "ibv_open_device");
  auto close = symbol<int (*)(void*)>(lib, "ibv_close_device");
  auto query = symbol<int (*)(void*, std::uint8_t, PortAttr*)>(lib, "ibv_query_port");
  if (!list || !free_list || !name || !open || !close || !query) {
    dlclose(lib);
    return false;
  }
  std::vector<RdmaPort> ports;
  int count = 0;
  void** devices = list(&count);
  for (int d = 0; devices && d < count; ++d) {
    const std::string dev = name(devices[d]) ? name(devices[d]) : "?";
    std::string pci;
    for (const RdmaPort& p : facts.rdma)
      if (p.device == dev) pci = p.pci;
    void* ctx = open(devices[d]);
    if (!ctx) {
      ports.push_back({dev, 1, "cannot be opened", "", pci});
      continue;
    }
    for (int port = 1; port <= 16; ++port) {
      PortAttr attr{};
      if (query(ctx, static_cast<std::uint8_t>(port), &attr) != 0) break;
      ports.push_back({dev, port, state_name(attr.state), link_layer_name(attr.link_layer), pci});
    }
    close(ctx);
  }
  if (devices) free_list(devices);
  dlclose(lib);
  facts.rdma = ports;
  return true;
}

}  // namespace rtd::launcher::doctor
