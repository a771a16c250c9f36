// The agent: rendezvous, then the restart loop around the Supervisor, then the
// end-of-job agreement through the store ("dtrun/failed", "dtrun/done").
#include "launcher/agent.h"

#include <thread>

#include "launcher/heartbeats.h"
#include "launcher/net.h"
#include "launcher/rendezvous_client.h"
#include "launcher/rendezvous_server.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"
#include "launcher/worker_env.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"
#include "runtime/core/log.h"

namespace rtd::launcher {
namespace {

constexpr const char* kFailedKey = "dtrun/failed";
constexpr const char* kDoneKey = "dtrun/done";
constexpr std::chrono::milliseconds kPeerPoll{500};

std::string fingerprint(const LaunchOptions& o) {
  return "max_restarts=" + std::to_string(o.max_restarts);
}

// "code|reason", as written under kFailedKey.
std::optional<Outcome> parse_failure(const std::string& value) {
  auto bar = value.find('|');
  int code = 1;
  try {
    code = std::stoi(value.substr(0, bar));
  } catch (const std::exception&) {
  }
  return Outcome{
      Ending::kStopRequested, code, -1,
      "another node failed: " + (bar == std::string::npos ? value : value.substr(bar + 1))};
}

// Polled while workers run: another node's failure, a silent node (node 0
// watches the heartbeats), or a lost rendezvous host (the others beat).
std::optional<Outcome> check_peers(Store& store, Heartbeats& heartbeats, int node_rank) {
  try {
    if (auto failed = store.try_get(kFailedKey)) return parse_failure(*failed);
    if (node_rank != 0) {
      heartbeats.beat(store, node_rank);
    } else if (auto silent = heartbeats.find_silent(store)) {
      return Outcome{Ending::kStopRequested, 1, -1, *silent};
    }
  } catch (const Error& e) {
    return Outcome{Ending::kStopRequested, 1, -1,
                   std::string("lost contact with the rendezvous host: ") + e.what()};
  }
  return std::nullopt;
}

struct Placement {
  proto::JoinResponse layout;
  std::string store_addr;
  std::string node_addr;
  std::unique_ptr<RendezvousServer> server;  // node rank 0 only
};

Placement rendezvous(const LaunchOptions& o) {
  Placement p;
  std::string rdzv_ip = resolve(o.rdzv_host);
  bool host = o.node_rank == 0 || (o.node_rank < 0 && (o.nnodes == 1 || is_local_address(rdzv_ip)));
  int port = o.rdzv_port;
  if (host) {
    std::string bind_ip = rdzv_ip;
    if (o.rdzv_bind_all) bind_ip = rdzv_ip.find(':') == std::string::npos ? "0.0.0.0" : "::";
    p.server = std::make_unique<RendezvousServer>(ServerOptions{
        .bind_ip = bind_ip,
        .port = o.rdzv_port,
        .token = o.token,
        .nnodes = o.nnodes,
        .nproc_per_node = o.nproc_per_node,
        .fingerprint = fingerprint(o),
        .master_port = free_port(rdzv_ip),
    });
    port = p.server->port();
  }
  p.store_addr = join_host_port(rdzv_ip, port);
  p.node_addr = local_address_towards(rdzv_ip, port);
  proto::JoinRequest req;
  req.set_host(p.node_addr);
  req.set_nproc_per_node(o.nproc_per_node);
  req.set_nnodes(o.nnodes);
  req.set_node_rank(host && o.node_rank < 0 ? 0 : o.node_rank);
  req.set_fingerprint(fingerprint(o));
  p.layout = join_rendezvous(p.store_addr, o.token, req, o.rdzv_timeout);
  return p;
}

std::vector<WorkerSpec> worker_specs(const LaunchOptions& o, const Placement& p,
                                     const EnvMap& parent_env, int attempt) {
  std::vector<WorkerSpec> specs;
  const auto& node = p.layout.nodes(p.layout.node_rank());
  for (int local = 0; local < node.nproc(); ++local) {
    specs.push_back(WorkerSpec{
        .global_rank = node.first_rank() + local,
        .env = build_worker_env(WorkerEnvInput{
            .parent = &parent_env,
            .layout = &p.layout,
            .local_rank = local,
            .store_addr = p.store_addr,
            .token = o.token,
            .node_addr = p.node_addr,
            .attempt = attempt,
            .max_restarts = o.max_restarts,
            .overrides = &o.env,
        }),
    });
  }
  return specs;
}

// Node rank 0 keeps the store up until every node's workers are done (or one
// failed, or went silent).
int wait_for_other_nodes(Store& store, int nnodes, Heartbeats& heartbeats) {
  auto logger = log::get("launcher");
  for (;;) {
    if (auto out = check_peers(store, heartbeats, 0)) {
      logger->error("{}", out->reason);
      return out->exit_code;
    }
    if (store.add(kDoneKey, 0) >= nnodes) return 0;
    if (int sig = take_pending_signal()) return 128 + sig;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int run_agent(const LaunchOptions& o, const LauncherConfig& env_config, const EnvMap& parent_env) {
  auto logger = log::get("launcher");
  std::string program = resolve_program(o.program, env_config.path);
  Placement p = rendezvous(o);
  const int node_rank = p.layout.node_rank();
  log::setup("dtrun node " + std::to_string(node_rank), env_config.log_spec);
  logger->info("joined: node {} of {}, {} workers, world size {}, store {}", node_rank,
               p.layout.nodes_size(), o.nproc_per_node, p.layout.world_size(), p.store_addr);

  // Until now a signal ends dtrun at once (nothing to stop); from here on it is
  // forwarded to the workers.
  install_signal_handlers();
  auto store = make_grpc_store(p.store_addr, o.token);
  Heartbeats heartbeats(o.nnodes, o.heartbeat_timeout);
  StopCheck stop_check;
  if (o.nnodes > 1) stop_check = [&] { return check_peers(*store, heartbeats, node_rank); };

  for (int attempt = 0;; ++attempt) {
    Supervisor supervisor(SupervisorOptions{
        .program_path = program,
        .args = o.args,
        .log_dir = o.log_dir,
        .attempt = attempt,
        .grace_period = o.grace_period,
    });
    supervisor.start(worker_specs(o, p, parent_env, attempt));
    Outcome out = supervisor.watch(stop_check, kPeerPoll);
    if (out.ending == Ending::kSuccess) break;
    if (out.ending == Ending::kWorkerFailed && attempt < o.max_restarts) {
      logger->warn("{}; restarting all workers ({} of {} restarts)", out.reason, attempt + 1,
                   o.max_restarts);
      continue;
    }
    if (out.ending == Ending::kWorkerFailed && o.nnodes > 1) {
      try {
        store->compare_set(kFailedKey, "",
                           std::to_string(out.exit_code) + "|node " + std::to_string(node_rank) +
                               ": " + out.reason);
      } catch (const Error& e) {
        logger->warn("could not tell the other nodes: {}", e.what());
      }
      // Node rank 0 keeps the store up a moment so that the others read why.
      if (p.server) std::this_thread::sleep_for(2 * kPeerPoll);
    }
    logger->error("job failed: {} (exit code {})", out.reason, out.exit_code);
    return out.exit_code;
  }
  if (o.nnodes > 1) {
    heartbeats.finished(*store, node_rank);
    store->add(kDoneKey, 1);
    if (p.server) return wait_for_other_nodes(*store, o.nnodes, heartbeats);
  }
  logger->info("all workers finished successfully");
  return 0;
}

}  // namespace rtd::launcher
