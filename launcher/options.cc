// Flag parsing for dtrun with CLI11, then the cross-flag checks CLI11 cannot express.
#include "launcher/options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "launcher/nccl_settings.h"
#include "launcher/net.h"
#include "rt_dist/error.h"
#include "runtime/core/slurm.h"
#include "runtime/core/store/tls.h"

namespace rtd::launcher {
namespace {

constexpr const char* kExamples = R"(
Examples:
  dtrun --nproc-per-node=4 ./train --steps 100
  # two nodes: the same line on each; the node that owns the --rdzv address hosts it
  dtrun --nproc-per-node=8 --nnodes=2 --rdzv=10.0.0.1:29500 ./train
  # the same, authenticated (a secret every node knows; or DTRUN_TOKEN, --token-file)
  dtrun --nproc-per-node=8 --nnodes=2 --rdzv=10.0.0.1:29500 --token=$TOK ./train
  dtrun --nproc-per-node=gpu --env NCCL_DEBUG=INFO --max-restarts=3 ./train
  # check the node(s) first, with the job's own flags: GPUs, NCCL, network, limits
  dtrun doctor [--bench] --nproc-per-node=8 --nnodes=2 --rdzv=10.0.0.1:29500

Workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...)
plus DTRUN_STORE, DTRUN_TOKEN and DTRUN_ROUND. dtrun --help-env lists the
environment variables dtrun and librt_dist read. Exit status: the first failing
worker's exit code; 2 for bad flags; 1 for a failed rendezvous.)";

// Flags that take a value as the next argument when written without '='.
const std::set<std::string> kValueFlags = {"--nproc-per-node",
                                           "--nproc_per_node",
                                           "--nnodes",
                                           "--rdzv-last-call",
                                           "--node-rank",
                                           "--node_rank",
                                           "--rdzv",
                                           "--rdzv-endpoint",
                                           "--rdzv_endpoint",
                                           "--rdzv-timeout",
                                           "--rdzv_timeout",
                                           "--max-restarts",
                                           "--max_restarts",
                                           "--recovery",
                                           "--grace-period",
                                           "--log-dir",
                                           "--log_dir",
                                           "--nccl-preset",
                                           "--env",
                                           "--token",
                                           "--heartbeat-timeout",
                                           "--token-file",
                                           "--rdzv-id",
                                           "--rdzv_id",
                                           "--rdzv-backend",
                                           "--rdzv_backend",
                                           "--master-addr",
                                           "--master_addr",
                                           "--master-port",
                                           "--master_port",
                                           "--redirects",
                                           "--tee",
                                           "--local-ranks-filter",
                                           "--local_ranks_filter"};

// Index of the first argument that belongs to the program (or of "--").
int find_program(int argc, const char* const* argv) {
  int i = 1;
  while (i < argc) {
    std::string a = argv[i];
    if (a == "--" || a.empty() || a[0] != '-') return i;
    i += (a.find('=') == std::string::npos && kValueFlags.count(a)) ? 2 : 1;
  }
  return std::min(i, argc);
}

// An empty value must not let the next argument stand in for it:
// `--token=$TOK --nnodes=2` with TOK unset would otherwise run a job whose
// token is "--nnodes=2". Checks dtrun's own arguments [1, end).
std::string check_values_present(int end, const char* const* argv) {
  for (int i = 1; i < end; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    const std::string name = a.substr(0, eq);
    if (!kValueFlags.count(name)) continue;
    if (eq != std::string::npos) {
      if (eq + 1 == a.size())
        return name +
               "= has an empty value (an unset shell variable?); give it a value or "
               "leave the flag out";
      continue;
    }
    if (i + 1 >= end) return name + " needs a value";
    const std::string next = argv[i + 1];
    if (next.empty())
      return name +
             " has an empty value (an unset shell variable?); give it a value or "
             "leave the flag out";
    if (next.rfind("--", 0) == 0)
      return name + " needs a value but is followed by the flag " + next +
             " (an unset shell variable?)";
    ++i;
  }
  return "";
}

// A whole number in [lo, hi], or why not, naming the flag.
std::string to_count(const char* flag, const std::string& text, int lo, int hi, int* out) {
  int value = 0;
  try {
    size_t used = 0;
    value = std::stoi(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    return std::string(flag) + "=" + text + ": not a number";
  }
  if (value < lo || value > hi) {
    return std::string(flag) + "=" + text + ": must be in " + std::to_string(lo) + ".." +
           std::to_string(hi);
  }
  *out = value;
  return "";
}

// --nproc-per-node: a number, or gpu / cpu / auto (the GPUs if any, else the CPUs).
std::string to_nproc(const std::string& text, const ParseContext& c, int* out) {
  if (text == "gpu" || (text == "auto" && c.gpus > 0)) {
    if (c.gpus == 0)
      return "--nproc-per-node=gpu: this node has no GPU that dtrun can see (no /dev/nvidiaN, or "
             "CUDA_VISIBLE_DEVICES empty); give a number, or cpu";
    *out = c.gpus;
    return "";
  }
  if (text == "cpu" || text == "auto") {
    *out = c.cpus;
    return "";
  }
  return to_count("--nproc-per-node", text, 1, 1024, out);
}

// The first line of a token file, or why it cannot be used.
std::string read_token_file(const std::string& path, std::string* token) {
  std::ifstream in(path);
  if (!in) return "--token-file=" + path + ": cannot read it (" + std::strerror(errno) + ")";
  std::getline(in, *token);
  while (!token->empty() && std::isspace(static_cast<unsigned char>(token->back())))
    token->pop_back();
  if (token->empty()) return "--token-file=" + path + ": the file is empty";
  return "";
}

std::string parse_endpoint(const std::string& text, LaunchOptions& o) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return "--rdzv '" + text + "' must be host:port, e.g. --rdzv=10.0.0.1:29500";
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string port = text.substr(colon + 1);
  int value = 0;
  try {
    size_t used = 0;
    value = std::stoi(port, &used);
    if (used != port.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    return "--rdzv '" + text + "': port '" + port + "' is not a number";
  }
  if (value < 1 || value > 65535) return "--rdzv '" + text + "': port must be in 1..65535";
  o.rdzv_host = host;
  o.rdzv_port = value;
  o.rdzv_given = true;
  return "";
}

// The flags CLI11 reads as text, checked and converted with messages that name them.
struct RawFlags {
  std::string nproc = "1", nnodes, node_rank, rdzv_timeout = "600", max_restarts = "0", grace = "5",
              heartbeat = "30", rdzv, token_file, last_call = "5", nccl_preset,
              restart_backoff = "1:30";
  std::vector<std::string> env;
  // torchrun's names for what dtrun does its own way.
  std::string rdzv_backend, master_addr, master_port, redirects, tee, local_ranks;
  std::string recovery = "restart", spare_workers = "0";
  bool standalone = false, module = false, no_python = false;
};

// torchrun's --redirects/--tee value: 0 none, 1 stdout, 2 stderr, 3 both.
std::string to_streams(const char* flag, const std::string& text, int* out) {
  if (text.empty()) return "";
  if (text.find(':') != std::string::npos)
    return std::string(flag) + "=" + text +
           ": per-rank values are not supported; give 0, 1, 2 or 3 for every rank";
  return to_count(flag, text, 0, 3, out);
}

bool is_etcd(const std::string& backend) { return backend == "etcd" || backend == "etcd-v2"; }

// torchrun's launch flags, mapped onto dtrun's: the rendezvous, how the
// program runs, what reaches the console.
std::string torchrun_compat(const RawFlags& f, LaunchOptions& o, std::string* rdzv) {
  if (!f.rdzv_backend.empty() && f.rdzv_backend != "c10d" && f.rdzv_backend != "static" &&
      !is_etcd(f.rdzv_backend))
    return "--rdzv-backend=" + f.rdzv_backend +
           ": dtrun accepts c10d and static (both mean its own rendezvous, hosted by one node) "
           "and etcd (etcd-v2 is the same): the rendezvous through an etcd cluster, so that "
           "any node can be lost";
  if (is_etcd(f.rdzv_backend)) {
    if (f.rdzv.empty())
      return "--rdzv-backend=etcd needs --rdzv=HOST:PORT[,HOST:PORT...] naming the etcd "
             "cluster's members";
    if (o.node_rank >= 0)
      return "--rdzv-backend=etcd elects the node that hosts the rounds and numbers the nodes "
             "itself: leave out --node-rank";
    if (!f.master_addr.empty() || !f.master_port.empty())
      return "--rdzv-backend=etcd takes the etcd members in --rdzv, not "
             "--master-addr/--master-port";
    if (o.rdzv_id.empty() || o.rdzv_id.size() > 64 ||
        o.rdzv_id.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
            std::string::npos)
      return "--rdzv-backend=etcd needs --rdzv-id=NAME (at most 64 letters, digits, '-', '_', "
             "'.'), the same on every node of the job and another for each job: its keys in "
             "etcd live under /dtrun/NAME/";
  }
  if (f.rdzv_backend == "static" && o.nnodes > 1 && o.node_rank < 0)
    return "--rdzv-backend=static needs --node-rank on every node (or leave it out: dtrun "
           "numbers the nodes itself)";
  if (!f.master_addr.empty() || !f.master_port.empty()) {
    if (!rdzv->empty()) return "give --rdzv or --master-addr/--master-port, not both";
    *rdzv = (f.master_addr.empty() ? "127.0.0.1" : f.master_addr) + ":" +
            (f.master_port.empty() ? "29500" : f.master_port);
  }
  if (f.standalone) {
    if (o.nnodes > 1 || o.min_nodes > 1)
      return "--standalone runs one node; leave out --nnodes=" + f.nnodes;
    rdzv->clear();  // a local rendezvous on a free port
  }
  int tee = 0;
  if (std::string err = to_streams("--redirects", f.redirects, &o.redirects); !err.empty())
    return err;
  if (std::string err = to_streams("--tee", f.tee, &tee); !err.empty()) return err;
  if ((o.redirects || tee) && o.log_dir.empty())
    return "--redirects and --tee write the workers' output to files: give --log-dir=DIR";
  o.redirects &= ~tee;  // tee'd streams reach the console too
  std::stringstream ranks(f.local_ranks);
  for (std::string item; std::getline(ranks, item, ',');) {
    int r = 0;
    if (std::string err = to_count("--local-ranks-filter", item, 0, 65535, &r); !err.empty())
      return err;
    o.local_ranks_filter.push_back(r);
  }
  // torchrun runs Python: a module with -m, a .py script with the interpreter
  // (unless --no-python); anything else runs as it is.
  const bool script = o.program.size() > 3 && o.program.ends_with(".py");
  if (f.module || (script && !f.no_python)) {
    o.args.insert(o.args.begin(), o.program);
    if (f.module) o.args.insert(o.args.begin(), "-m");
    o.program = "python3";
  }
  // A spare is the interpreter itself, started ahead with `-m rt_dist.spare`.
  const std::string base = o.program.substr(o.program.rfind('/') + 1);
  if (o.spare_workers > 0 && !o.program.empty() && !base.starts_with("python"))
    return "--spare-workers needs a Python program (python3 train.py, train.py or -m MODULE): "
           "a spare is an interpreter that has imported torch and waits to become a worker; '" +
           o.program + "' is not a Python interpreter";
  return "";
}

// --restart-backoff=FIRST[:MOST] seconds (0 turns it off).
std::string to_backoff(const std::string& text, LaunchOptions* o) {
  const auto colon = text.find(':');
  int first = 0, most = 0;
  const std::string hint = " (--restart-backoff=FIRST[:MOST] seconds, e.g. 1:30)";
  if (std::string err = to_count("--restart-backoff", text.substr(0, colon), 0, 3600, &first);
      !err.empty())
    return err + hint;
  most = std::max(first, 30);
  if (colon != std::string::npos) {
    if (std::string err =
            to_count("--restart-backoff (MOST)", text.substr(colon + 1), 0, 86400, &most);
        !err.empty())
      return err + hint;
    if (most < first) return "--restart-backoff=" + text + ": MOST must not be below FIRST" + hint;
  }
  o->restart_backoff = std::chrono::seconds(first);
  o->restart_backoff_max = std::chrono::seconds(most);
  return "";
}

// --nnodes=N, or torchrun's elastic --nnodes=MIN:MAX.
std::string to_nnodes(const std::string& text, LaunchOptions* o) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    std::string err = to_count("--nnodes", text, 1, 65536, &o->nnodes);
    o->min_nodes = o->nnodes;
    return err;
  }
  for (std::string err :
       {to_count("--nnodes (MIN)", text.substr(0, colon), 1, 65536, &o->min_nodes),
        to_count("--nnodes (MAX)", text.substr(colon + 1), 1, 65536, &o->nnodes)}) {
    if (!err.empty()) return err + " (--nnodes=MIN:MAX, e.g. --nnodes=2:4)";
  }
  if (o->min_nodes > o->nnodes)
    return "--nnodes=" + text + ": MIN must not exceed MAX (--nnodes=MIN:MAX, e.g. --nnodes=2:4)";
  return "";
}

// Under srun, one dtrun per node: the step says how many nodes, which one
// this is, and (its first host) where the rendezvous is.
std::string from_slurm(const SlurmStep& s, RawFlags& f, LaunchOptions& o) {
  if (!f.nnodes.empty() && f.nnodes != std::to_string(s.nnodes)) return "";  // the user's own plan
  if (s.ntasks != s.nnodes) {
    return "under srun, dtrun runs once per node and starts the workers itself, but this step "
           "has " +
           std::to_string(s.ntasks) + " tasks on " + std::to_string(s.nnodes) +
           " nodes: use srun --ntasks-per-node=1 (or run the trainer with srun alone, one task "
           "per GPU)";
  }
  o.from_slurm = true;
  f.nnodes = std::to_string(s.nnodes);
  if (f.node_rank.empty()) f.node_rank = std::to_string(s.node_id);
  if (f.rdzv.empty() && s.nnodes > 1 && f.master_addr.empty()) {
    try {
      f.rdzv = slurm::first_host(s.nodelist) + ":" +
               std::to_string(slurm::default_port(s.job_id, s.step_id));
    } catch (const std::exception& e) {
      return std::string(e.what()) + ", or give --rdzv=HOST:PORT";
    }
  }
  return "";
}

std::string convert(const RawFlags& f, const ParseContext& c, LaunchOptions& o) {
  int rdzv_timeout = 0, grace = 0, heartbeat = 0, last_call = 0;
  const std::string preset = f.nccl_preset.empty() ? c.nccl_preset : f.nccl_preset;
  NcclPreset parsed_preset;
  if (!parse_nccl_preset(preset, &parsed_preset)) {
    return (f.nccl_preset.empty() ? "RTD_NCCL_PRESET=" : "--nccl-preset=") + preset +
           ": the presets are nvlink, ib, roce and tcp (or none)";
  }
  o.nccl_preset = preset_name(parsed_preset);
  for (std::string err :
       {to_nproc(f.nproc, c, &o.nproc_per_node), to_nnodes(f.nnodes.empty() ? "1" : f.nnodes, &o),
        f.node_rank.empty() ? std::string()
                            : to_count("--node-rank", f.node_rank, 0, 65535, &o.node_rank),
        to_count("--rdzv-timeout", f.rdzv_timeout, 1, 86400, &rdzv_timeout),
        to_count("--max-restarts", f.max_restarts, 0, 1000, &o.max_restarts),
        to_count("--grace-period", f.grace, 0, 3600, &grace),
        to_count("--heartbeat-timeout", f.heartbeat, 1, 86400, &heartbeat),
        to_count("--rdzv-last-call", f.last_call, 0, 3600, &last_call),
        to_count("--spare-workers", f.spare_workers, 0, 64, &o.spare_workers),
        to_backoff(f.restart_backoff, &o)}) {
    if (!err.empty()) return err;
  }
  if (f.recovery != "restart" && f.recovery != "in-process")
    return "--recovery=" + f.recovery +
           " must be restart (a failed worker restarts the job's workers) or in-process (it "
           "is started again alone; the trainer recovers with rtd::Recovery)";
  o.recovery_in_process = f.recovery == "in-process";
  if (o.spare_workers > 0 && !o.recovery_in_process)
    return "--spare-workers=" + f.spare_workers +
           ": spares replace failed workers in process; give --recovery=in-process too";
  o.rdzv_timeout = std::chrono::seconds(rdzv_timeout);
  o.grace_period = std::chrono::seconds(grace);
  o.heartbeat_timeout = std::chrono::seconds(heartbeat);
  o.last_call = std::chrono::seconds(last_call);
  if (o.min_nodes < o.nnodes && o.node_rank > 0)
    return "--node-rank cannot be given with --nnodes=" + f.nnodes +
           ": an elastic job numbers its nodes anew each round (the node owning the --rdzv "
           "address is 0)";
  return "";
}

std::string check(LaunchOptions& o, const RawFlags& f, const ParseContext& c) {
  const std::string& rdzv = f.rdzv;
  const std::vector<std::string>& env = f.env;
  if (is_etcd(f.rdzv_backend)) {
    try {
      o.etcd_endpoints = parse_etcd_endpoints(rdzv);
    } catch (const Error& e) {
      return e.what();
    }
    // The first member stands for the cluster: this node's address is the one
    // that routes to it.
    std::string err = parse_endpoint(o.etcd_endpoints.front(), o);
    if (!err.empty()) return err;
  } else if (!rdzv.empty()) {
    std::string err = parse_endpoint(rdzv, o);
    if (!err.empty()) return err;
  }
  if (o.node_rank >= o.nnodes) {
    return "--node-rank=" + std::to_string(o.node_rank) +
           " must be less than --nnodes=" + std::to_string(o.nnodes);
  }
  if (o.nnodes > 1 && !o.rdzv_given) {
    return "--nnodes=" + std::to_string(o.nnodes) +
           " needs --rdzv=host:port naming node rank 0's host";
  }
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return "--env '" + kv + "' must be KEY=VALUE";
    o.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (!f.token_file.empty()) {
    if (!o.token.empty()) return "give --token or --token-file, not both";
    std::string err = read_token_file(f.token_file, &o.token);
    if (!err.empty()) return err;
  }
  if (o.token.empty()) o.token = c.env_token;
  // TLS: the flags, else DTRUN_TLS_*; all three or none, readable PEM; made
  // absolute, since the workers (another directory, perhaps) read them too.
  if (!o.tls.enabled()) {
    o.tls.cert = c.env_tls.cert;
    o.tls.key = c.env_tls.key;
    o.tls.ca = c.env_tls.ca;
  }
  if (o.tls.peer_names.empty()) o.tls.peer_names = c.env_tls.peer_names;
  o.store_max_keys = c.store_max_keys;
  o.store_max_mb = c.store_max_mb;
  if (std::string err = tls_problem(o.tls); !err.empty()) return err;
  for (std::string* path : {&o.tls.cert, &o.tls.key, &o.tls.ca})
    if (!path->empty()) *path = std::filesystem::absolute(*path).string();
  if (o.token.empty()) {
    if (o.nnodes == 1) {
      o.token = random_token();  // every caller is on this host: nothing to share
    } else if (c.require_token) {
      return "--nnodes > 1 needs a job token shared by every node (--require-token or "
             "DTRUN_REQUIRE_TOKEN=1): pass --token=SECRET, --token-file=FILE or set DTRUN_TOKEN "
             "on each node";
    } else {
      o.token_warning =
          "the control plane is unauthenticated: anyone who can reach " + rdzv +
          " can join this job or read its store. Give every node the same secret with "
          "--token=SECRET, --token-file=FILE or DTRUN_TOKEN; --require-token (or "
          "DTRUN_REQUIRE_TOKEN=1) makes one mandatory";
    }
  }
  return "";
}

}  // namespace

ParseResult parse_options(int argc, const char* const* argv, const ParseContext& context) {
  LaunchOptions o;
  RawFlags f;
  bool require_token = false;

  CLI::App app{"dtrun: start one worker per GPU (or CPU slot) on each node and supervise them",
               "dtrun"};
  app.footer(kExamples);
  app.add_option("--nproc-per-node,--nproc_per_node", f.nproc,
                 "workers on this node: a number, gpu, cpu or auto (GPUs if any, else CPUs)");
  app.add_option("--nnodes", f.nnodes,
                 "nodes in the job: N, or MIN:MAX for an elastic job (starts with MIN or more, "
                 "takes in nodes that join later up to MAX, goes on without lost ones while MIN "
                 "remain)");
  app.add_option("--rdzv-last-call", f.last_call,
                 "with --nnodes=MIN:MAX: seconds to wait for more nodes once MIN have joined");
  app.add_option("--node-rank,--node_rank", f.node_rank,
                 "this node's rank (default: the node owning the --rdzv address is 0, the "
                 "others are numbered by address)");
  app.add_option("--rdzv,--rdzv-endpoint,--rdzv_endpoint", f.rdzv,
                 "host:port of the rendezvous (an address of the node that hosts it)");
  app.add_flag("--rdzv-bind-all", o.rdzv_bind_all,
               "the hosting node listens on every interface, not only the --rdzv host's");
  app.add_option("--rdzv-timeout,--rdzv_timeout", f.rdzv_timeout,
                 "seconds to wait for every node to join");
  app.add_option("--max-restarts,--max_restarts", f.max_restarts,
                 "restarts of all local workers after a failure");
  app.add_option("--recovery", f.recovery,
                 "restart (default): a failed worker restarts every worker of the job; "
                 "in-process: it is started again alone, and trainers that use rtd::Recovery "
                 "go on without restarting (docs/recovery.md)");
  app.add_option("--spare-workers", f.spare_workers,
                 "with --recovery=in-process and a Python program: N interpreters started "
                 "ahead, torch imported, each of which becomes a failed worker in its place "
                 "in a fraction of a fresh start (docs/recovery.md)");
  app.add_option("--restart-backoff", f.restart_backoff,
                 "FIRST[:MOST]: seconds to wait before the first restart, doubling (with "
                 "jitter) up to MOST (default 1:30; 0 restarts at once)");
  app.add_option("--grace-period", f.grace,
                 "seconds between SIGTERM and SIGKILL when stopping workers (a second Ctrl-C "
                 "skips it)");
  app.add_option("--heartbeat-timeout", f.heartbeat,
                 "seconds after which a node that is no longer heard from is lost");
  app.add_option("--log-dir,--log_dir", o.log_dir, "also write each worker's output to files here");
  app.add_option("--nccl-preset", f.nccl_preset,
                 "nvlink|ib|roce|tcp: NCCL_* values for that fabric where you set none "
                 "(RTD_NCCL_PRESET; docs/operations.md)");
  app.add_option("--env", f.env, "KEY=VALUE for every worker (repeatable)");
  app.add_option("--token", o.token, "job token every control-plane call carries (DTRUN_TOKEN)");
  app.add_option("--token-file", f.token_file, "read the job token from this file's first line");
  app.add_option("--tls-cert", o.tls.cert,
                 "this node's certificate (PEM, naming the --rdzv host): the control plane over "
                 "mutual TLS, with --tls-key and --tls-ca (DTRUN_TLS_CERT)");
  app.add_option("--tls-key", o.tls.key, "its private key (PEM) (DTRUN_TLS_KEY)");
  app.add_option("--tls-ca", o.tls.ca,
                 "the CA that signed every node's certificate (PEM) (DTRUN_TLS_CA)");
  app.add_option("--tls-peer-names", o.tls.peer_names,
                 "NAME[,NAME...]: accept only peers whose certificate names one of these (its "
                 "common name, or a DNS, IP or URI name), not any the CA signed "
                 "(DTRUN_TLS_PEER_NAMES)");
  app.add_flag("--require-token", require_token,
               "refuse to run several nodes without a token (DTRUN_REQUIRE_TOKEN=1)");
  const char* torchrun = "torchrun's flags";
  app.add_flag("--standalone", f.standalone, "one node, a local rendezvous on a free port")
      ->group(torchrun);
  app.add_option("--rdzv-id,--rdzv_id", o.rdzv_id, "job id; every node must give the same")
      ->group(torchrun);
  app.add_option("--rdzv-backend,--rdzv_backend", f.rdzv_backend,
                 "c10d or static: dtrun's own rendezvous; etcd (or etcd-v2): through the etcd "
                 "cluster that --rdzv=HOST:PORT[,...] names (docs/rendezvous.md)")
      ->group(torchrun);
  app.add_option("--master-addr,--master_addr", f.master_addr,
                 "with --master-port: the rendezvous address (as --rdzv=ADDR:PORT)")
      ->group(torchrun);
  app.add_option("--master-port,--master_port", f.master_port, "see --master-addr (default 29500)")
      ->group(torchrun);
  app.add_flag("-m,--module", f.module, "the program is a Python module: python3 -m PROGRAM")
      ->group(torchrun);
  app.add_flag("--no-python,--no_python", f.no_python,
               "run a .py program as it is, not with python3")
      ->group(torchrun);
  app.add_option("--redirects", f.redirects,
                 "0-3: workers' stdout (1), stderr (2) or both (3) to the --log-dir files only")
      ->group(torchrun);
  app.add_option("--tee", f.tee, "0-3: these streams to the files and the console")
      ->group(torchrun);
  app.add_option("--local-ranks-filter,--local_ranks_filter", f.local_ranks,
                 "comma-separated local ranks whose output reaches the console")
      ->group(torchrun);

  // dtrun's flags end where the program begins; CLI11 sees only dtrun's part.
  const int program_at = find_program(argc, argv);
  if (std::string err = check_values_present(program_at, argv); !err.empty())
    return ParseResult{.exit_code = 2, .message = "dtrun: " + err + "\nRun dtrun --help."};
  try {
    app.parse(program_at, argv);
  } catch (const CLI::CallForHelp&) {
    return ParseResult{.exit_code = 0, .message = app.help()};
  } catch (const CLI::ParseError& e) {
    return ParseResult{.exit_code = 2,
                       .message = std::string("dtrun: ") + e.what() + "\nRun dtrun --help."};
  }
  std::vector<std::string> rest(argv + program_at, argv + argc);
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty() && !context.program_optional) {
    return ParseResult{.exit_code = 2,
                       .message =
                           "dtrun: no program given\nUsage: dtrun [flags] program "
                           "[args...]; run dtrun --help."};
  }
  if (!rest.empty()) {
    o.program = rest.front();
    o.args.assign(rest.begin() + 1, rest.end());
  }
  ParseContext c = context;
  c.require_token = c.require_token || require_token;
  std::string err = c.slurm ? from_slurm(*c.slurm, f, o) : "";
  if (err.empty()) err = convert(f, c, o);
  if (err.empty()) err = torchrun_compat(f, o, &f.rdzv);
  if (err.empty()) err = check(o, f, c);
  if (!err.empty()) return ParseResult{.exit_code = 2, .message = "dtrun: " + err};
  return ParseResult{.options = std::move(o)};
}

}  // namespace rtd::launcher
