// The agent: rendezvous, then the restart loop around the Supervisor, then the
// end-of-job agreement through the store. With several nodes, every attempt
// ends alike everywhere: each node says under "dtrun/attempt<N>/" that its
// workers are done, or that one failed; a failure with restarts left stops
// every node's workers, all nodes meet, and all start attempt N + 1 together;
// without restarts left it becomes the job's ("dtrun/failed").
#include "launcher/agent.h"

#include <cerrno>
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
constexpr std::chrono::milliseconds kPeerPoll{500};
constexpr std::chrono::milliseconds kLeavePoll{100};  // node 0 alone polls while the others leave
constexpr std::chrono::seconds kLeaveWait{10};        // node 0 keeps the store up for the others

// Keys of one attempt: "failed" (code|reason of the first failure), "done",
// "stopped" and "leaving" (counters of nodes).
std::string attempt_key(int attempt, const char* what) {
  return "dtrun/attempt" + std::to_string(attempt) + "/" + what;
}

std::string fingerprint(const LaunchOptions& o) {
  return "max_restarts=" + std::to_string(o.max_restarts) +
         (o.rdzv_id.empty() ? "" : ", rdzv_id=" + o.rdzv_id);
}

// "code|reason", as written under kFailedKey and attempt_key(N, "failed").
Outcome parse_failure(const std::string& value, bool restart) {
  auto bar = value.find('|');
  int code = 1;
  try {
    code = std::stoi(value.substr(0, bar));
  } catch (const std::exception&) {
  }
  Outcome out{Ending::kStopRequested, code, -1,
              "another node failed: " + (bar == std::string::npos ? value : value.substr(bar + 1))};
  out.restart = restart;
  return out;
}

// Polled while workers run and while nodes meet: the job's failure, a failure
// in this attempt (attempt < 0: not looked for), a silent node (node 0
// watches the heartbeats), or a lost rendezvous host (the others beat).
std::optional<Outcome> check_peers(Store& store, Heartbeats& heartbeats, int node_rank,
                                   int attempt) {
  try {
    if (auto failed = store.try_get(kFailedKey)) return parse_failure(*failed, false);
    if (attempt >= 0) {
      if (auto failed = store.try_get(attempt_key(attempt, "failed")))
        return parse_failure(*failed, true);
    }
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

// A worker failed on this node. A worker on another node may have failed
// first and caused it (a collective across nodes aborts on every rank), so
// every node that saw a failure records when (wall clock, in ms) under
// attempt_key(N, "failure/<node>"), waits kCauseWait for the others' records,
// and names the earliest as the cause.
constexpr std::chrono::milliseconds kCauseWait{1000};

Outcome first_cause(Store& store, int attempt, int node_rank, int nnodes, Outcome mine) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const long long my_ms = duration_cast<milliseconds>(mine.failed_at.time_since_epoch()).count();
  const std::string prefix = attempt_key(attempt, "failure/");
  store.set(prefix + std::to_string(node_rank),
            std::to_string(my_ms) + "|" + std::to_string(mine.exit_code) + "|" + mine.reason);
  long long best_ms = my_ms;
  int best_node = node_rank, best_code = mine.exit_code;
  std::string best_reason;
  const auto give_up = std::chrono::steady_clock::now() + kCauseWait;
  do {
    std::this_thread::sleep_for(kCauseWait / 10);
    for (int n = 0; n < nnodes; ++n) {
      if (n == node_rank) continue;
      auto record = store.try_get(prefix + std::to_string(n));
      if (!record) continue;
      const auto bar1 = record->find('|'), bar2 = record->find('|', bar1 + 1);
      if (bar1 == std::string::npos || bar2 == std::string::npos) continue;
      try {
        const long long ms = std::stoll(record->substr(0, bar1));
        if (ms < best_ms) {
          best_ms = ms;
          best_node = n;
          best_code = std::stoi(record->substr(bar1 + 1, bar2 - bar1 - 1));
          best_reason = record->substr(bar2 + 1);
        }
      } catch (const std::exception&) {
      }
    }
  } while (std::chrono::steady_clock::now() < give_up);
  if (best_node == node_rank) return mine;
  Outcome out = mine;
  out.exit_code = best_code;
  out.reason = "node " + std::to_string(best_node) + " failed first: " + best_reason +
               "; on this node, " + mine.reason + " " + std::to_string(my_ms - best_ms) +
               " ms later";
  return out;
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
  // Without --node-rank, the agent on the host that owns the --rdzv address
  // hosts it; a second agent on that host finds the port taken and joins.
  bool host = o.node_rank == 0 || (o.node_rank < 0 && (o.nnodes == 1 || is_local_address(rdzv_ip)));
  int port = o.rdzv_port;
  if (host) {
    std::string bind_ip = rdzv_ip;
    if (o.rdzv_bind_all) bind_ip = rdzv_ip.find(':') == std::string::npos ? "0.0.0.0" : "::";
    try {
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
    } catch (const Error& e) {
      if (o.node_rank >= 0 || o.nnodes == 1 || e.backend_code() != EADDRINUSE) throw;
      log::get("launcher")
          ->info("port {} is taken on this host: joining the rendezvous there as a client",
                 o.rdzv_port);
      host = false;
    }
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
  const auto& node = p.layout.node();
  for (int local = 0; local < node.nproc(); ++local) {
    specs.push_back(WorkerSpec{
        .global_rank = node.first_rank() + local,
        .local_rank = local,
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

// Counts this node under attempt_key(attempt, what), then waits until every
// node has. Returns what ended the wait otherwise: the job's failure, this
// attempt's failure (when watch_attempt), a silent node, a lost store, a signal.
std::optional<Outcome> meet(Store& store, Heartbeats& heartbeats, int node_rank, int nnodes,
                            int attempt, const char* what, bool watch_attempt) {
  try {
    store.add(attempt_key(attempt, what), 1);
    for (;;) {
      if (auto out = check_peers(store, heartbeats, node_rank, watch_attempt ? attempt : -1))
        return out;
      if (store.add(attempt_key(attempt, what), 0) >= nnodes) return std::nullopt;
      if (int sig = take_pending_signal()) {
        return Outcome{Ending::kSignal, 128 + sig, -1, "signal " + std::to_string(sig)};
      }
      std::this_thread::sleep_for(kPeerPoll);
    }
  } catch (const Error& e) {
    return Outcome{Ending::kStopRequested, 1, -1,
                   std::string("lost contact with the rendezvous host: ") + e.what()};
  }
}

// The job succeeded everywhere: node 0 keeps the store up until every node
// has read so (at most kLeaveWait), the others say they are leaving.
void leave(Store& store, Heartbeats& heartbeats, int node_rank, int nnodes, int attempt,
           bool host) {
  try {
    if (node_rank != 0) heartbeats.finished(store, node_rank);
    store.add(attempt_key(attempt, "leaving"), 1);
    if (!host) return;
    const auto give_up = std::chrono::steady_clock::now() + kLeaveWait;
    while (store.add(attempt_key(attempt, "leaving"), 0) < nnodes &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(kLeavePoll);
    }
  } catch (const Error& e) {
    log::get("launcher")
        ->warn("could not tell the other nodes that this one is done: {}", e.what());
  }
}

}  // namespace

int run_agent(const LaunchOptions& o, const LauncherConfig& env_config, const EnvMap& parent_env) {
  auto logger = log::get("launcher");
  std::string program = resolve_program(o.program, env_config.path);
  if (!o.token_warning.empty()) logger->warn("{}", o.token_warning);
  Placement p = rendezvous(o);
  const int node_rank = p.layout.node_rank();
  log::setup("dtrun node " + std::to_string(node_rank), env_config.log_spec);
  logger->info("joined: node {} of {}, {} workers, world size {}, store {}", node_rank,
               p.layout.nnodes(), o.nproc_per_node, p.layout.world_size(), p.store_addr);

  // Until now a signal ends dtrun at once (nothing to stop); from here on it is
  // forwarded to the workers.
  install_signal_handlers();
  // Every call gives up after --heartbeat-timeout: a node that loses the
  // rendezvous host (killed, or partitioned away) notices within it, as node 0
  // notices a silent node.
  auto store = make_grpc_store(p.store_addr, o.token)->bounded(o.heartbeat_timeout);
  Heartbeats heartbeats(o.nnodes, o.heartbeat_timeout);
  const bool many = o.nnodes > 1;

  for (int attempt = 0;; ++attempt) {
    Supervisor supervisor(SupervisorOptions{
        .program_path = program,
        .args = o.args,
        .log_dir = o.log_dir,
        .console_stdout = (o.redirects & 1) == 0,
        .console_stderr = (o.redirects & 2) == 0,
        .console_local_ranks = o.local_ranks_filter,
        .attempt = attempt,
        .grace_period = o.grace_period,
    });
    supervisor.start(worker_specs(o, p, parent_env, attempt));
    StopCheck stop_check;
    if (many) stop_check = [&] { return check_peers(*store, heartbeats, node_rank, attempt); };
    Outcome out = supervisor.watch(stop_check, kPeerPoll);
    // This node's workers are done; the attempt is the job's once every node's are.
    if (many && out.ending == Ending::kSuccess) {
      if (auto ended = meet(*store, heartbeats, node_rank, o.nnodes, attempt, "done", true))
        out = *ended;
    }
    if (out.ending == Ending::kSuccess) {
      if (many) leave(*store, heartbeats, node_rank, o.nnodes, attempt, p.server != nullptr);
      break;
    }
    const bool failed_here = out.ending == Ending::kWorkerFailed;
    if (failed_here && many) {
      try {
        out = first_cause(*store, attempt, node_rank, o.nnodes, out);
      } catch (const Error& e) {
        logger->warn("could not compare this failure with the other nodes': {}", e.what());
      }
    }
    if ((failed_here || out.restart) && attempt < o.max_restarts) {
      logger->warn("{}; restarting all workers ({} of {} restarts)", out.reason, attempt + 1,
                   o.max_restarts);
      if (!many) continue;
      if (failed_here) {
        try {
          store->compare_set(attempt_key(attempt, "failed"), "",
                             std::to_string(out.exit_code) + "|node " + std::to_string(node_rank) +
                                 ": " + out.reason);
        } catch (const Error& e) {
          logger->warn("could not tell the other nodes: {}", e.what());
        }
      }
      // Every node's workers of this attempt are gone before any starts the next.
      auto ended = meet(*store, heartbeats, node_rank, o.nnodes, attempt, "stopped", false);
      if (!ended) continue;
      out = *ended;
    }
    if (failed_here && many) {
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
  logger->info("all workers finished successfully");
  return 0;
}

}  // namespace rtd::launcher
