// Hosting or joining the rendezvous (placement.h).
#include "launcher/placement.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "launcher/net.h"
#include "launcher/rendezvous_client.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd::launcher {
namespace {

// What every node of one job agrees on. The program and its arguments are
// in it (the program's name, and a hash of the whole command line as typed):
// an unrelated job sent to the same rendezvous port, elastic or not, is
// another job and is refused, not merged into this one.
std::string fingerprint(const LaunchOptions& o) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
  auto mix = [&](const std::string& text) {
    for (char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    hash = (hash ^ 0xffu) * 1099511628211ull;  // a separator no argument holds
  };
  mix(o.program);
  for (const std::string& a : o.args) mix(a);
  std::string name =
      o.program.substr(o.program.rfind('/') == std::string::npos ? 0 : o.program.rfind('/') + 1);
  if (name.size() > 64) name = name.substr(0, 64);
  for (char& c : name) {
    if (c < 0x20 || c > 0x7e) c = '?';  // the fingerprint is printable
  }
  char command[24];
  std::snprintf(command, sizeof(command), "%016llx", static_cast<unsigned long long>(hash));
  return "max_restarts=" + std::to_string(o.max_restarts) +
         (o.rdzv_id.empty() ? "" : ", rdzv_id=" + o.rdzv_id) + ", program=" + name + ", command " +
         command;
}

StoreServiceLimits store_limits(const LaunchOptions& o) {
  StoreServiceLimits limits;
  limits.store.max_keys = static_cast<std::size_t>(o.store_max_keys);
  limits.store.max_bytes = static_cast<std::size_t>(o.store_max_mb) << 20;
  return limits;
}

}  // namespace

proto::JoinResponse join(const LaunchOptions& o, Placement& p, int last_round, int restarts) {
  proto::JoinRequest req;
  req.set_host(p.node_addr);
  req.set_nproc_per_node(o.nproc_per_node);
  req.set_nnodes(o.nnodes);
  req.set_min_nodes(o.min_nodes);
  req.set_node_rank(p.host ? 0 : o.node_rank);
  req.set_fingerprint(fingerprint(o));
  req.set_node_id(p.node_id);
  req.set_last_round(last_round);
  req.set_restarts(restarts);
  req.set_agent_secret(p.layout.agent_secret());
  if (!p.etcd) return join_rendezvous(p.store_addr, o.token, req, o.rdzv_timeout, o.tls);
  const auto until = std::chrono::system_clock::now() + o.rdzv_timeout;
  for (;;) {
    req.set_node_rank(p.host ? 0 : -1);
    const auto left =
        std::chrono::duration_cast<std::chrono::seconds>(until - std::chrono::system_clock::now());
    try {
      return join_rendezvous(p.store_addr, o.token, req, std::max(left, std::chrono::seconds(1)),
                             o.tls, o.heartbeat_timeout);
    } catch (const Error& e) {
      if (e.category() != ErrorCategory::kUnavailable || std::chrono::system_clock::now() >= until)
        throw;
      log::get("launcher")
          ->warn("the host of the job's rounds at {} is gone ({}); finding the next", p.store_addr,
                 e.what());
      find_etcd_host(o, p, p.store_addr);
    }
  }
}

void find_etcd_host(const LaunchOptions& o, Placement& p, const std::string& gone) {
  auto start = [&](const std::optional<ResumeFrom>& resume) {
    EtcdHosting* etcd = p.etcd.get();
    // Held until the server has bound its own port, which must not be it.
    const PortHold master_port(p.node_addr);
    return std::make_unique<RendezvousServer>(ServerOptions{
        .bind_ip = p.node_addr,
        .port = 0,
        .token = o.token,
        .min_nodes = o.min_nodes,
        .max_nodes = o.nnodes,
        .nproc_per_node = o.nproc_per_node,
        .fingerprint = fingerprint(o),
        .master_port = master_port.port(),
        .last_call = o.last_call,
        .heartbeat_timeout = o.heartbeat_timeout,
        .host_node_id = p.node_id,
        .tls = o.tls,
        .store_limits = store_limits(o),
        .resume = resume,
        .on_round = [etcd](const proto::RoundRecord& r) { etcd->record(r); },
    });
  };
  std::unique_ptr<RendezvousServer> server;
  p.store_addr =
      p.etcd->find_host(gone, std::chrono::system_clock::now() + o.rdzv_timeout, start, &server);
  if (server) {
    p.server = std::move(server);
    p.host = true;
  }
}

Placement rendezvous(const LaunchOptions& o) {
  Placement p;
  p.node_id = random_token().substr(0, 16);
  std::string rdzv_ip = resolve(o.rdzv_host);
  // Without --node-rank, the agent on the host that owns the --rdzv address
  // hosts it; a second agent on that host finds the port taken and joins.
  p.host = o.node_rank == 0 || (o.node_rank < 0 && (o.nnodes == 1 || is_local_address(rdzv_ip)));
  int port = o.rdzv_port;
  if (!o.etcd_endpoints.empty()) {
    p.node_addr = local_address_towards(rdzv_ip, o.rdzv_port);
    p.etcd = std::make_unique<EtcdHosting>(EtcdHostingOptions{
        .endpoints = o.etcd_endpoints,
        .tls = o.tls,
        .job = o.rdzv_id,
        .ttl = o.heartbeat_timeout,
        .node_id = p.node_id,
        .node_addr = p.node_addr,
    });
    p.host = false;
    find_etcd_host(o, p, "");
    p.layout = join(o, p, -1, 0);
    p.job_store = p.etcd->job_store(p.layout.run_id());
    EtcdHosting* etcd = p.etcd.get();
    p.relay = std::make_unique<StoreRelay>(p.node_addr, p.job_store, o.token, o.tls,
                                           [etcd] { return etcd->lost(); });
    p.job_store_addr = join_host_port(p.node_addr, p.relay->port());
    return p;
  }
  if (p.host) {
    const StoreServiceLimits limits = store_limits(o);
    std::string bind_ip = rdzv_ip;
    if (o.rdzv_bind_all) bind_ip = rdzv_ip.find(':') == std::string::npos ? "0.0.0.0" : "::";
    try {
      // Held until the server has bound its own port (port 0 in a one-node
      // job), which must not be the one handed to workers as MASTER_PORT.
      const PortHold master_port(rdzv_ip);
      p.server = std::make_unique<RendezvousServer>(ServerOptions{
          .bind_ip = bind_ip,
          .port = o.rdzv_port,
          .token = o.token,
          .min_nodes = o.min_nodes,
          .max_nodes = o.nnodes,
          .nproc_per_node = o.nproc_per_node,
          .fingerprint = fingerprint(o),
          .master_port = master_port.port(),
          .last_call = o.last_call,
          .heartbeat_timeout = o.heartbeat_timeout,
          .host_node_id = p.node_id,
          .tls = o.tls,
          .store_limits = limits,
      });
      port = p.server->port();
    } catch (const Error& e) {
      if (o.node_rank >= 0 || o.nnodes == 1 || e.backend_code() != EADDRINUSE) throw;
      log::get("launcher")
          ->info("port {} is taken on this host: joining the rendezvous there as a client",
                 o.rdzv_port);
      p.host = false;
    }
  }
  p.store_addr = join_host_port(rdzv_ip, port);
  p.node_addr = local_address_towards(rdzv_ip, port);
  p.layout = join(o, p, -1, 0);
  return p;
}

}  // namespace rtd::launcher
