// Config: every environment variable librt_dist and dtrun read, parsed once into
// typed fields. config.cc is the only reader of the process environment.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "runtime/core/tls_files.h"

namespace rtd {

using EnvMap = std::map<std::string, std::string>;

// A snapshot of the process environment (the only place that reads it).
EnvMap read_process_env();

struct ConfigVar {
  const char* name;
  const char* default_value;  // "" when unset means "absent"
  const char* unit;           // "0/1", "seconds", "count", "path", ...
  const char* readers;        // "librt_dist" (each worker), "dtrun", or both
  const char* doc;            // its meaning (Markdown: docs/config.md prints it as it is)
};
// RTD_TRACE_DIR and RTD_TRACE_EVENTS for the trace recorder, which starts
// before any Context: never throws (Config::from_env reports a malformed
// RTD_TRACE_EVENTS; here it falls back to the default).
struct TraceSettings {
  std::string dir;
  int events = 200000;
};
TraceSettings trace_settings_from_env(const EnvMap& env);

// The table that `dtrun --help-env` prints and docs/config.md is generated from.
std::span<const ConfigVar> config_table();

struct Config {
  // Worker placement as the launcher wrote it (dtrun and torchrun share names).
  std::optional<int> rank, world_size, local_rank, local_world_size, group_rank;
  std::string master_addr;
  std::optional<int> master_port;
  // Open MPI and Slurm placement.
  std::optional<int> ompi_rank, ompi_size, ompi_local_rank, ompi_local_size;
  std::optional<int> slurm_procid, slurm_ntasks, slurm_localid, slurm_nodeid;
  std::optional<int> slurm_job_id, slurm_step_id;
  std::string slurm_nodelist;        // SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST
  std::string slurm_tasks_per_node;  // SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE
  // dtrun's own.
  std::string store_addr;      // DTRUN_STORE host:port
  std::string token;           // DTRUN_TOKEN
  TlsFiles tls;                // DTRUN_TLS_CERT, DTRUN_TLS_KEY, DTRUN_TLS_CA
  int round = 0;               // DTRUN_ROUND
  std::string node_addr;       // DTRUN_ADDR: where this node's workers listen
  std::string recovery;        // DTRUN_RECOVERY: "in-process" or empty
  int generation = 0;          // DTRUN_GENERATION
  bool recovery_join = false;  // DTRUN_RECOVERY_JOIN: a newcomer to a job running in process
  std::chrono::milliseconds recovery_wait{60'000};  // RTD_RECOVERY_WAIT_S
  // Library settings.
  std::string log_spec = "info";                // RTD_LOG
  std::chrono::milliseconds timeout{300'000};   // RTD_TIMEOUT_S
  std::chrono::milliseconds hang_warn{60'000};  // RTD_HANG_WARN_S (0: off)
  bool check_collectives = false;               // RTD_CHECK_COLLECTIVES
  std::string flight_dir;                       // RTD_FLIGHT_DIR
  std::string backend = "auto";                 // RTD_BACKEND
  // NCCL communicator settings (-1 / empty: NCCL's default).
  int nccl_cga_cluster_size = -1;  // RTD_NCCL_CGA_CLUSTER_SIZE
  int nccl_min_ctas = -1;          // RTD_NCCL_MIN_CTAS
  int nccl_max_ctas = -1;          // RTD_NCCL_MAX_CTAS
  std::string nccl_net_name;       // RTD_NCCL_NET_NAME
  std::string nccl_cta_policy;     // RTD_NCCL_CTA_POLICY: "", default, efficiency, zero
  int ce_reduce_blocks = -1;       // RTD_CE_REDUCE_BLOCKS
  int ce_copy_streams = 0;         // RTD_CE_COPY_STREAMS (0: unset, one stream)
  bool ce_staged = false;          // RTD_CE_STAGED: all_reduce staged by copy engines
  std::string ce_sites;  // RTD_CE_SITES: staged sites' methods (NcclSettings::staged_sites)
  // RTD_NCCL_INLINE_BYTES: small calls on the caller's stream.
  static constexpr long long kNcclInlineBytes = 1 << 20;
  long long nccl_inline_bytes = kNcclInlineBytes;
  bool nccl_direct_init = true;  // RTD_NCCL_DIRECT_INIT: the data-path communicator made directly
  std::string trace_dir;         // RTD_TRACE_DIR (empty: no trace)
  int trace_events = 200000;     // RTD_TRACE_EVENTS: the ring's size

  // Throws rtd::Error(kConfig) naming the variable when a value is malformed.
  static Config from_env(const EnvMap& env);
};

// What dtrun itself reads: only these, so that a worker's variables (RANK, ...)
// in the caller's shell never make the launcher fail.
// A step that srun started (SLURM_STEP_NUM_NODES and SLURM_NODEID set): where
// dtrun finds its node count, node rank and rendezvous host.
struct SlurmStep {
  int nnodes = 0;   // SLURM_STEP_NUM_NODES
  int node_id = 0;  // SLURM_NODEID
  int ntasks = 0;   // SLURM_STEP_NUM_TASKS, else SLURM_NTASKS
  int job_id = 0;   // SLURM_JOB_ID
  int step_id = 0;  // SLURM_STEP_ID
  std::string nodelist;
};

struct LauncherConfig {
  std::string token;            // DTRUN_TOKEN
  TlsFiles tls;                 // DTRUN_TLS_CERT, DTRUN_TLS_KEY, DTRUN_TLS_CA
  bool require_token = false;   // DTRUN_REQUIRE_TOKEN=1
  int store_max_keys = 262144;  // DTRUN_STORE_MAX_KEYS: the job's store's quota (the host's)
  int store_max_mb = 256;       // DTRUN_STORE_MAX_MB
  // CUDA_VISIBLE_DEVICES as set (empty set: no GPU), or nullopt when unset.
  std::optional<std::string> cuda_visible_devices;
  std::string log_spec = "info";   // RTD_LOG
  std::string nccl_preset;         // RTD_NCCL_PRESET
  std::string path;                // PATH, to find the program
  std::optional<SlurmStep> slurm;  // under srun
};
LauncherConfig launcher_config_from_env(const EnvMap& env);

}  // namespace rtd
