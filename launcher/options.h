// LaunchOptions: dtrun's command line (torchrun's flag names), parsed and
// checked in one place; main.cc only calls parse_options.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/config.h"

namespace rtd::launcher {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;                     // the most nodes (--nnodes=N, or MAX of --nnodes=MIN:MAX)
  int min_nodes = 1;                  // the fewest the job runs with (N when fixed)
  int node_rank = -1;                 // -1: decided at rendezvous
  std::chrono::seconds last_call{5};  // --nnodes=MIN:MAX: after MIN joined, wait for more
  std::string rdzv_host = "127.0.0.1";
  int rdzv_port = 0;  // 0 with --nnodes=1: any free port
  bool rdzv_given = false;
  bool rdzv_bind_all = false;
  std::chrono::seconds rdzv_timeout{600};
  std::chrono::seconds grace_period{5};
  std::chrono::seconds heartbeat_timeout{30};  // node 0 gives up on a silent node
  int max_restarts = 0;
  // --recovery=in-process: a failed worker is started again alone, in a new
  // generation (docs/recovery.md); at most kMaxReplacementsPerWorker times a
  // round per local worker, then the failure ends the round as usual.
  bool recovery_in_process = false;
  // --spare-workers=N (with in-process recovery, a Python program): N
  // interpreters started ahead, torch imported, that become the failed
  // workers' replacements (python/rt_dist/spare.py).
  int spare_workers = 0;
  // Before restart K (1-based): FIRST * 2^(K-1), at most MOST, each node
  // drawing ±25% so that the nodes do not all come back at once.
  std::chrono::seconds restart_backoff{1};
  std::chrono::seconds restart_backoff_max{30};
  std::string log_dir;
  // torchrun's --redirects: 1 stdout, 2 stderr, 3 both go to the --log-dir
  // files only, not to dtrun's console (--tee: both, as --log-dir does anyway).
  int redirects = 0;
  std::vector<int> local_ranks_filter;  // console output of these local ranks only
  std::string rdzv_id;                  // every node must give the same (or none)
  // --rdzv-backend=etcd: the etcd cluster's members (--rdzv's list); empty:
  // dtrun's own rendezvous, hosted by the node that owns the --rdzv address.
  std::vector<std::string> etcd_endpoints;
  std::vector<std::pair<std::string, std::string>> env;
  // From --token, --token-file or DTRUN_TOKEN; else generated (1 node) or
  // empty: several nodes without a token run unauthenticated (token_warning
  // says so), unless --require-token / DTRUN_REQUIRE_TOKEN=1.
  std::string token;
  std::string token_warning;
  TlsFiles tls;  // --tls-cert/--tls-key/--tls-ca or DTRUN_TLS_*: mutual TLS (absolute paths)
  // The job's store's quota where this node hosts it (DTRUN_STORE_MAX_KEYS, DTRUN_STORE_MAX_MB).
  int store_max_keys = 262144;
  int store_max_mb = 256;
  std::string program;
  std::vector<std::string> args;
  bool from_slurm = false;           // the placement came from srun's variables
  std::string nccl_preset = "none";  // --nccl-preset or RTD_NCCL_PRESET: nvlink|ib|roce|tcp|none
};

struct ParseResult {
  std::optional<LaunchOptions> options;  // empty when the process should exit
  int exit_code = 0;                     // 0 after --help, 2 for bad flags
  std::string message;                   // help text or the error, for the caller to print
};

// What the parser takes from the environment and the machine (read by the
// configuration module and the caller, so that parsing stays pure).
struct ParseContext {
  std::string env_token;        // DTRUN_TOKEN
  TlsFiles env_tls;             // DTRUN_TLS_CERT, DTRUN_TLS_KEY, DTRUN_TLS_CA
  int store_max_keys = 262144;  // DTRUN_STORE_MAX_KEYS
  int store_max_mb = 256;       // DTRUN_STORE_MAX_MB
  bool require_token = false;   // DTRUN_REQUIRE_TOKEN
  int gpus = 0;                 // GPUs this node's workers may use (--nproc-per-node=gpu)
  int cpus = 1;                 // CPUs (--nproc-per-node=cpu)
  // Under srun: the step's nodes, this node's rank and the rendezvous host
  // stand in for --nnodes, --node-rank and --rdzv when those are not given.
  std::optional<SlurmStep> slurm;
  std::string nccl_preset;        // RTD_NCCL_PRESET (the flag wins)
  bool program_optional = false;  // dtrun doctor: the job's flags, with or without its program
};

ParseResult parse_options(int argc, const char* const* argv, const ParseContext& context);

}  // namespace rtd::launcher
