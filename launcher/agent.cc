// The agent: rendezvous, then the loop of rounds around the Supervisor. Every
// round ends alike on every node (peers.h): all workers done, or a failure
// with restarts left (every node stops its workers and rejoins for the next
// round), or a change of membership (the same, without spending a restart),
// or the job's failure. Rejoining is the barrier: a round closes only once
// every member of the last one is back, so no node's new workers meet an old one.
#include "launcher/agent.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "launcher/doctor/facts.h"
#include "launcher/doctor/gpu_probe.h"
#include "launcher/heartbeats.h"
#include "launcher/nccl_settings.h"
#include "launcher/net.h"
#include "launcher/orphan_guard.h"
#include "launcher/peers.h"
#include "launcher/placement.h"
#include "launcher/python_path.h"
#include "launcher/rendezvous_client.h"
#include "launcher/rendezvous_server.h"
#include "launcher/restart_policy.h"
#include "launcher/settings_exchange.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"
#include "launcher/trace_merge.h"
#include "launcher/worker_env.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"
#include "runtime/core/log.h"
#include "runtime/core/store/grpc_store.h"

namespace rtd::launcher {
namespace {

constexpr std::chrono::milliseconds kPeerPoll{500};
// How long a node whose worker failed first waits for the host to say whether
// a node was lost (Membership::kReconnectGrace, plus ticks and the answer).
constexpr std::chrono::milliseconds kLossWait{3000};
// In-process recovery: how many times a round a local worker may be started
// again alone before its failure ends the round as usual.
constexpr int kMaxReplacementsPerWorker = 3;

// Sleeps `wait`, or less when a signal comes: returns it (0: none).
int sleep_unless_signalled(std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    if (int sig = take_pending_signal()) return sig;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(50), std::chrono::duration_cast<std::chrono::milliseconds>(
                                           until - std::chrono::steady_clock::now())));
  }
  return take_pending_signal();
}

// This dtrun's rt_dist Python package, looked for once.
const std::string& python_dir() {
  static const std::string dir = [] {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : rt_dist_python_dir(exe.string());
  }();
  return dir;
}

// The workers of this node (`only`: these local ranks), starting in `generation`.
std::vector<WorkerSpec> worker_specs(const LaunchOptions& o, const Placement& p,
                                     const EnvMap& parent_env, int generation = 0,
                                     const std::vector<int>* only = nullptr, bool joining = false) {
  std::vector<WorkerSpec> specs;
  const auto& node = p.layout.node();
  for (int local = 0; local < node.nproc(); ++local) {
    if (only && std::find(only->begin(), only->end(), local) == only->end()) continue;
    specs.push_back(WorkerSpec{
        .global_rank = node.first_rank() + local,
        .local_rank = local,
        .env = build_worker_env(WorkerEnvInput{
            .parent = &parent_env,
            .layout = &p.layout,
            .local_rank = local,
            .store_addr = p.job_store_addr.empty() ? p.store_addr : p.job_store_addr,
            .token = o.token,
            .tls = &o.tls,
            .node_addr = p.node_addr,
            .round = p.layout.round(),
            .restarts = p.layout.restarts(),
            .max_restarts = o.max_restarts,
            .recovery = o.recovery_in_process,
            .generation = generation,
            .joining = joining,
            .overrides = &o.env,
            .python_dir = python_dir(),
        }),
    });
  }
  return specs;
}

// With RTD_TRACE_DIR set for the workers, node 0 merges the ranks' traces
// that are in that directory (all of them where it is shared by the nodes),
// those of this job's last round only.
void merge_trace(const LaunchOptions& o, const EnvMap& parent_env,
                 const proto::JoinResponse& layout) {
  const Settings s = effective_settings(parent_env, o.env, "");
  auto dir = s.find("RTD_TRACE_DIR");
  if (layout.node_rank() != 0 || dir == s.end() || dir->second.empty()) return;
  try {
    const MergedTrace merged = merge_traces(dir->second, TraceRun{.run = layout.run_id(),
                                                                  .restart = layout.restarts(),
                                                                  .world = layout.world_size()});
    const std::string others =
        merged.skipped == 0
            ? ""
            : " (" + std::to_string(merged.skipped) + " file(s) of other jobs or rounds left out)";
    if (merged.ranks == 0)
      log::get("launcher")
          ->warn("no rank of this job wrote its trace in {}{}", dir->second, others);
    else
      log::get("launcher")
          ->info("trace of {} rank(s): {}/trace.json{}", merged.ranks, dir->second, others);
  } catch (const Error& e) {
    log::get("launcher")->warn("could not merge the trace: {}", e.what());
  }
}

std::string recovery_key(int round, const std::string& what) {
  return "round" + std::to_string(round) + "/recovery/" + what;
}

// Whether every rank of the round said it recovers in process (rtd::Recovery::enable).
bool every_rank_recovers(Store& store, int round, int world_size) {
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r)
    keys.push_back(recovery_key(round, "capable/" + std::to_string(r)));
  for (std::size_t i = 0; i < keys.size(); i += 4096) {
    const std::vector<std::string> some(
        keys.begin() + static_cast<std::ptrdiff_t>(i),
        keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), i + 4096)));
    if (!store.check(some)) return false;
  }
  return true;
}

// The kept workers of this node, waiting in rtd::Recovery::recover, learn
// their place in the next round: "ROUND RANK WORLD NODE" under their old rank.
// `heard`: when this node heard of the change (for the log: the time to the new round).
void move_workers(Store& store, int round, int old_first, const proto::JoinResponse& next,
                  std::chrono::steady_clock::time_point heard) {
  for (int local = 0; local < next.node().nproc(); ++local) {
    store.set(recovery_key(round, "move/" + std::to_string(old_first + local)),
              std::to_string(next.round()) + " " +
                  std::to_string(next.node().first_rank() + local) + " " +
                  std::to_string(next.world_size()) + " " + std::to_string(next.node_rank()));
  }
  // The workers' communicators of the round end: those blocked in a
  // collective with a lost peer abort it (Recovery's watch).
  const long long generation = store.add(recovery_key(round, "generation"), 0);
  store.set(recovery_key(round, "end/" + std::to_string(generation)),
            "the workers move to round " + std::to_string(next.round()));
  log::get("launcher")
      ->info(
          "the workers move to round {} in place, ranks {}-{} of {} (in-process recovery; the "
          "round formed {:.0f} ms after this node heard of the loss)",
          next.round(), next.node().first_rank(),
          next.node().first_rank() + next.node().nproc() - 1, next.world_size(),
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - heard)
              .count());
}

}  // namespace

int run_agent(const LaunchOptions& options, const LauncherConfig& env_config,
              const EnvMap& parent_env) {
  auto logger = log::get("launcher");
  OrphanGuard guard;  // what the workers start dies with dtrun, however dtrun ends
  LaunchOptions o = options;
  // The preset's NCCL_* values join the workers' environment (--env wins, and
  // so does dtrun's own environment); the nodes compare what results.
  doctor::Facts node;
  NcclPreset preset = NcclPreset::kNone;
  parse_nccl_preset(o.nccl_preset, &preset);
  if (preset != NcclPreset::kNone) doctor::read_sysfs_facts("", node);
  for (const std::string& line : apply_preset(preset, node, parent_env, o.env))
    logger->info("{}", line);
  if (o.nnodes > 1) doctor::probe_nccl(node);
  const Settings settings = effective_settings(parent_env, o.env, node.nccl_version);
  std::string program = resolve_program(o.program, env_config.path);
  if (auto dir = settings.find("RTD_TRACE_DIR"); dir != settings.end() && !dir->second.empty())
    prepare_trace_dir(dir->second);
  if (!o.token_warning.empty()) logger->warn("{}", o.token_warning);
  if (o.from_slurm) {
    logger->info("under srun: node {} of {}, rendezvous at {}:{}", o.node_rank, o.nnodes,
                 o.rdzv_host, o.rdzv_port);
  }
  Placement p = rendezvous(o);
  log::setup("dtrun node " + std::to_string(p.layout.node_rank()), env_config.log_spec);
  logger->info("joined: node {} of {}, {} workers, world size {}, store {}", p.layout.node_rank(),
               p.layout.nnodes(), o.nproc_per_node, p.layout.world_size(), p.store_addr);

  // Until now a signal ends dtrun at once (nothing to stop); from here on it is
  // forwarded to the workers.
  install_signal_handlers();
  // Every call gives up after --heartbeat-timeout: a node that loses the
  // rendezvous host (killed, or partitioned away) notices within it, as the
  // host notices a silent node.
  const auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(o.heartbeat_timeout);
  // A copy: the layout is replaced every round (the secret stays the same).
  const std::string secret = p.layout.agent_secret();
  std::shared_ptr<Store> store;
  std::unique_ptr<Peers> peers_of_host;
  // The store and the heartbeats reach the host of the rounds (another one
  // after the etcd backend replaced a lost host). The host's own heartbeats
  // stay in its process, where no load on its server can starve them.
  auto connect = [&] {
    store = make_grpc_store(p.store_addr, o.token, secret, o.tls)->bounded(limit);
    peers_of_host = std::make_unique<Peers>(
        store,
        std::make_unique<HeartbeatClient>(p.store_addr, o.token, secret, limit, o.tls,
                                          p.server ? p.server->in_process_beat() : InProcessBeat{}),
        p.etcd != nullptr);
  };
  connect();
  // The workers' store: the host's, or with the etcd backend etcd itself,
  // which a lost host does not take with it.
  auto job_store = [&]() -> Store& { return p.job_store ? *p.job_store : *store; };
  const bool many = o.nnodes > 1;
  std::vector<std::string> failures;  // what failed before each restart, in order
  const double jitter = draw_jitter();

  std::unique_ptr<Supervisor> kept;  // workers kept across a round (in-process recovery)
  int cur_round = 0, cur_node_rank = 0, replacements = 0;
  bool first_start = true;  // this agent's first workers (a newcomer's, where round > 0)
  for (;;) {
    Peers& peers = *peers_of_host;
    const int round = p.layout.round(), node_rank = p.layout.node_rank();
    const int nnodes = p.layout.nnodes(), restarts = p.layout.restarts();
    if (round > 0 && many) {
      log::setup("dtrun node " + std::to_string(node_rank), env_config.log_spec);
      logger->info("round {}: node {} of {}, world size {}", round, node_rank, nnodes,
                   p.layout.world_size());
    }
    if (many) {
      // Beating from the round's start: the host finds this node gone at
      // once if its dtrun dies (its held call closes), whatever it does then.
      peers.check(round, node_rank, NodeState::kRunning);
      std::string error;
      bool silent = false;  // a node joined and never said its settings
      try {
        error = check_settings_across_nodes(*store, round, node_rank, nnodes, settings,
                                            p.server != nullptr, limit)
                    .error;
      } catch (const Error& e) {
        error = std::string("could not compare the nodes' settings: ") + e.what();
        silent = e.category() == ErrorCategory::kTimeout;
      }
      // In an elastic job a node that joined and went silent is the host's
      // to drop, within its heartbeat timeout, which the wait above may end
      // just before: a stranger's Join must not end the job. The round
      // forms again without it (workers kept from the round before, under
      // in-process recovery, cannot follow this way: the job fails as before).
      if (!error.empty() && silent && o.min_nodes < o.nnodes && !kept) {
        std::optional<Outcome> news = peers.wait_for_news(round, node_rank, limit + kLossWait);
        if (news && news->rejoin) {
          logger->warn("{}; {}: rejoining without it", error, news->reason);
          try {
            if (news->host_lost) {
              find_etcd_host(o, p, p.store_addr);
              connect();
            }
            p.layout = join(o, p, round, restarts);
            continue;
          } catch (const Error& e) {
            error += std::string("; could not rejoin for the next round: ") + e.what();
          }
        }
      }
      if (!error.empty()) {
        logger->error("job failed: {}", error);
        return 1;
      }
    }
    // In-process recovery: a failed worker is started again alone, in the
    // next generation of the round, which the survivors wait for in the
    // store (rt_dist/recovery.h) to rebuild their communicator with it.
    if (!kept) replacements = 0;
    cur_round = round;
    cur_node_rank = node_rank;
    using ReplaceFn = decltype(SupervisorOptions::replace);
    auto replace = [&](const std::vector<int>& local_ranks,
                       const std::string& why) -> std::optional<std::vector<WorkerSpec>> {
      replacements += static_cast<int>(local_ranks.size());
      if (replacements > kMaxReplacementsPerWorker * o.nproc_per_node) {
        logger->warn(
            "{}; workers of this node failed {} times this round: no more in-process "
            "recovery",
            why, replacements);
        return std::nullopt;
      }
      long long generation = 0;
      try {
        if (!every_rank_recovers(job_store(), cur_round, p.layout.world_size())) {
          logger->warn(
              "{}; not every worker of the job recovers in process "
              "(rtd::Recovery::enable, rt_dist.torch.recovery.Job): the round ends as for any "
              "failure",
              why);
          return std::nullopt;
        }
        generation = job_store().add(recovery_key(cur_round, "generation"), 1);
        // The survivors' communicators of the last generation end (their
        // watch aborts those blocked on the lost worker).
        job_store().set(recovery_key(cur_round, "end/" + std::to_string(generation - 1)), why);
      } catch (const Error& e) {
        logger->warn("{}; could not start a new generation: {}", why, e.what());
        return std::nullopt;
      }
      logger->warn(
          "{}; starting it again alone, in generation {} (in-process recovery: the "
          "other workers keep running)",
          why, generation);
      return worker_specs(o, p, parent_env, static_cast<int>(generation), &local_ranks);
    };
    std::unique_ptr<Supervisor> supervisor = std::move(kept);
    if (supervisor) {
      supervisor->renumber(p.layout.node().first_rank());
    } else {
      supervisor = std::make_unique<Supervisor>(SupervisorOptions{
          .program_path = program,
          .args = o.args,
          .log_dir = o.log_dir,
          .console_stdout = (o.redirects & 1) == 0,
          .console_stderr = (o.redirects & 2) == 0,
          .console_local_ranks = o.local_ranks_filter,
          .attempt = round,
          .grace_period = o.grace_period,
          .guard = &guard,
          // The other nodes learn why this one stops before its workers do.
          .on_signal =
              [&](int sig) {
                if (many)
                  peers_of_host->record_failure(
                      cur_round, cur_node_rank,
                      Outcome{Ending::kSignal, 128 + sig, -1,
                              std::string("its dtrun received ") + strsignal(sig)},
                      true);
              },
          .replace = o.recovery_in_process ? ReplaceFn(replace) : ReplaceFn(),
          .spares = o.spare_workers,
          .spare_env =
              [&] {
                const std::vector<int> first{0};
                return worker_specs(o, p, parent_env, 0, &first).front().env;
              },
      });
      // A newcomer to a job that recovers in process: its workers get their
      // state from the running ones (rtd::Recovery::sync).
      const bool joining = o.recovery_in_process && first_start && round > 0;
      supervisor->start(worker_specs(o, p, parent_env, 0, nullptr, joining));
    }
    first_start = false;
    StopCheck stop_check;
    if (many)
      stop_check = [&]() -> std::optional<Outcome> {
        // Cut off from etcd, this node is dropped by the others: its workers stop.
        if (p.etcd) {
          if (std::string why = p.etcd->lost(); !why.empty())
            return Outcome{
                Ending::kStopRequested, 1, -1,
                "this node lost its lease in etcd, so the job goes on without it: " + why};
        }
        std::optional<Outcome> news = peers.check(round, node_rank, NodeState::kRunning);
        // A node lost or joined, and every rank recovers in process: the
        // workers stay, and move to the next round in place (their dtrun
        // tells them where; a newcomer's workers get the state from them).
        // A lost host took the workers' store with it, unless it is in etcd.
        if (news && news->rejoin && o.recovery_in_process && (!news->host_lost || p.job_store)) {
          try {
            news->keep_workers = every_rank_recovers(job_store(), round, p.layout.world_size());
          } catch (const Error& e) {
            logger->warn("could not tell whether every worker recovers in process: {}", e.what());
          }
        }
        return news;
      };
    Outcome out = supervisor->watch(stop_check, kPeerPoll);
    const auto watched = std::chrono::steady_clock::now();
    // This node's workers are done; the round is the job's once every node's are.
    if (many && out.ending == Ending::kSuccess) {
      if (auto ended = peers.meet_done(round, node_rank, nnodes)) out = *ended;
    }
    if (out.ending == Ending::kSuccess) {
      if (many) peers.leave(round, node_rank, nnodes, p.server != nullptr);
      if (p.etcd && p.server) {
        try {
          p.etcd->forget_job();
        } catch (const Error& e) {
          logger->warn("could not remove the job's round record from etcd: {}", e.what());
        }
      }
      break;
    }
    bool failed_here = out.ending == Ending::kWorkerFailed;
    if (failed_here && many) {
      try {
        out = peers.first_cause(round, node_rank, nnodes, out);
      } catch (const Error& e) {
        logger->warn("could not compare this failure with the other nodes': {}", e.what());
      }
      // A membership change stops every node's workers; a worker whose peer
      // went first may fail before its own node stops it. That is the
      // change's doing, not a failure to spend a restart on. A lost node is
      // named by the host a moment after its workers' peers fail: the wait.
      // A killed node records nothing: the first failure the others recorded
      // may be one of its consequences, so the wait holds whoever failed first.
      std::optional<Outcome> news = peers.wait_for_news(round, node_rank, kLossWait);
      if (news && news->rejoin) {
        logger->info("{}, while the job's membership changes: not counted as a failure",
                     out.reason);
        out = *news;
        failed_here = false;
      } else if (news && !news->restart) {
        // The job ends for a reason found elsewhere (the host's word that a
        // node was lost, or a node stopped by a signal): this node's failure
        // is its consequence, and this node exits as that one does.
        out.reason = news->reason + "; on this node, " + out.reason;
        out.exit_code = news->exit_code;
        failed_here = false;
      }
    }
    int next_restarts = -1;  // -1: the job ends
    if (failed_here || out.restart) failures.push_back(out.reason);
    if ((failed_here || out.restart) && restarts < o.max_restarts) {
      const auto wait =
          restart_backoff(restarts + 1, o.restart_backoff, o.restart_backoff_max, jitter);
      logger->warn("{}; restarting all workers in {:.1f} s ({} of {} restarts)", out.reason,
                   wait.count() / 1000.0, restarts + 1, o.max_restarts);
      if (failed_here && many) peers.record_failure(round, node_rank, out, false);
      if (int sig = sleep_unless_signalled(wait)) {
        logger->error("job failed: dtrun received {} while waiting to restart", strsignal(sig));
        return 128 + sig;
      }
      next_restarts = restarts + 1;
    } else if (out.rejoin) {
      logger->info(
          "{}: {}", out.reason,
          out.keep_workers ? "rejoining, the workers kept" : "the workers stopped; rejoining");
      next_restarts = restarts;
    }
    if (next_restarts >= 0 && !many) {
      p.layout.set_round(round + 1);
      p.layout.set_restarts(next_restarts);
      continue;
    }
    if (next_restarts >= 0) {
      try {
        if (out.host_lost) {
          find_etcd_host(o, p, p.store_addr);
          connect();
        }
        const int old_first = p.layout.node().first_rank();
        p.layout = join(o, p, round, next_restarts);
        if (out.keep_workers) {
          move_workers(job_store(), round, old_first, p.layout, watched);
          // Workers still training (nothing failed: a node joined) look
          // for the move when told (rtd::Recovery::should_move).
          supervisor->signal_workers(SIGUSR1);
          kept = std::move(supervisor);
        }
        continue;
      } catch (const Error& e) {
        out = Outcome{Ending::kStopRequested, 1, -1,
                      std::string("could not rejoin for the next round: ") + e.what()};
      }
    }
    if (failed_here && many) {
      peers_of_host->record_failure(round, node_rank, out, true);
      // The host keeps the store up a moment so that the others read why.
      if (p.server) std::this_thread::sleep_for(2 * kPeerPoll);
    }
    if ((failed_here || out.restart) && o.max_restarts > 0 && restarts >= o.max_restarts)
      logger->error("job failed: {}", budget_spent(failures, o.max_restarts));
    logger->error("job failed: {} (exit code {})", out.reason, out.exit_code);
    merge_trace(o, parent_env, p.layout);
    return out.exit_code;
  }
  logger->info("all workers finished successfully");
  merge_trace(o, parent_env, p.layout);
  return 0;
}

}  // namespace rtd::launcher
