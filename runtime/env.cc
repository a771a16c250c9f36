// World detection and consistency checks over the parsed Config.
#include "runtime/env.h"

#include <unistd.h>

#include <optional>
#include <string>

#include "collectives/mpi/mpi_api.h"
#include "collectives/mpi/mpi_session.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/slurm.h"

namespace rtd {
namespace {

[[noreturn]] void bad(const std::string& message) { throw Error(ErrorCategory::kConfig, message); }

int require(const std::optional<int>& value, const char* name, const char* launcher) {
  if (!value)
    bad(std::string(name) + " is not set, but other " + launcher +
        " variables are; set it or unset them");
  return *value;
}

void check_below(int value, const char* name, int bound, const char* bound_name) {
  if (value >= bound) {
    bad(std::string(name) + "=" + std::to_string(value) + " must be less than " + bound_name + "=" +
        std::to_string(bound));
  }
}

WorldInfo from_torchrun_names(const Config& c) {
  const char* who = c.store_addr.empty() ? "torchrun" : "dtrun";
  WorldInfo w;
  w.launcher = who;
  w.rank = require(c.rank, "RANK", who);
  w.world_size = require(c.world_size, "WORLD_SIZE", who);
  w.local_rank = c.local_rank.value_or(0);
  w.local_world_size = c.local_world_size.value_or(w.world_size);
  w.node_rank = c.group_rank.value_or(0);
  return w;
}

WorldInfo from_mpi(const Config& c) {
  WorldInfo w;
  w.launcher = "mpirun";
  w.rank = *c.ompi_rank;
  w.world_size = require(c.ompi_size, "OMPI_COMM_WORLD_SIZE", "Open MPI");
  w.local_rank = c.ompi_local_rank.value_or(0);
  w.local_world_size = c.ompi_local_size.value_or(1);
  w.node_rank = w.local_world_size > 0 ? w.rank / w.local_world_size : 0;
  return w;
}

WorldInfo from_slurm(const Config& c) {
  WorldInfo w;
  w.launcher = "slurm";
  w.rank = *c.slurm_procid;
  w.world_size = require(c.slurm_ntasks, "SLURM_NTASKS", "Slurm");
  w.local_rank = c.slurm_localid.value_or(0);
  w.node_rank = c.slurm_nodeid.value_or(0);
  w.local_world_size = c.slurm_tasks_per_node.empty()
                           ? 1
                           : slurm::tasks_on_node(c.slurm_tasks_per_node, w.node_rank);
  return w;
}

}  // namespace

WorldInfo detect_world(const Config& c) {
  WorldInfo w;
  if (c.rank || c.world_size || !c.store_addr.empty()) {
    w = from_torchrun_names(c);
    check_below(w.rank, "RANK", w.world_size, "WORLD_SIZE");
    check_below(w.local_rank, "LOCAL_RANK", w.local_world_size, "LOCAL_WORLD_SIZE");
    if (w.local_world_size > w.world_size) {
      bad("LOCAL_WORLD_SIZE=" + std::to_string(w.local_world_size) +
          " must not exceed WORLD_SIZE=" + std::to_string(w.world_size));
    }
  } else if (c.ompi_rank) {
    w = from_mpi(c);
    check_below(w.rank, "OMPI_COMM_WORLD_RANK", w.world_size, "OMPI_COMM_WORLD_SIZE");
  } else if (c.slurm_procid) {
    w = from_slurm(c);
    check_below(w.rank, "SLURM_PROCID", w.world_size, "SLURM_NTASKS");
  }
  return w;
}

// The default backend (env.h): RTD_BACKEND, else the caller's choice, else NCCL when
// a GPU is visible, else on host buffers Open MPI's under mpirun (it measured
// faster than Gloo there, on one host and through UCX: docs/mpi.md) and Gloo
// otherwise.
std::string choose_backend(const Config& config, const InitOptions& options,
                           const WorldInfo& world) {
  if (config.backend != "auto") return config.backend;
  if (options.backend == Backend::kGloo) return "gloo";
  if (options.backend == Backend::kNccl) return "nccl";
  if (options.backend == Backend::kMpi) return "mpi";
  if (usable_gpu_count(nullptr) > 0) return "nccl";
  if (world.launcher != "mpirun" || world.world_size < 2) return "gloo";
  // A trainer that initialized MPI itself without thread support keeps Gloo.
  try {
    if (mpi::MpiSession::shared()->thread_level() >= mpi::kThreadSerialized) return "mpi";
  } catch (const Error& e) {
    log::get("runtime")->warn("Open MPI cannot carry the collectives ({}): using Gloo", e.what());
    return "gloo";
  }
  log::get("runtime")->warn(
      "MPI was initialized without thread support (MPI_Init_thread with "
      "MPI_THREAD_SERIALIZED or more lets librt_dist use it): the collectives use Gloo");
  return "gloo";
}

std::string data_host(const Config& config, const WorldInfo& world) {
  if (!config.node_addr.empty()) return config.node_addr;
  if (world.local_world_size == world.world_size) return "127.0.0.1";
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

NcclSettings nccl_settings_from(const Config& config, NcclSettings settings) {
  if (settings.cga_cluster_size < 0) settings.cga_cluster_size = config.nccl_cga_cluster_size;
  if (settings.min_ctas < 0) settings.min_ctas = config.nccl_min_ctas;
  if (settings.max_ctas < 0) settings.max_ctas = config.nccl_max_ctas;
  if (settings.net_name.empty()) settings.net_name = config.nccl_net_name;
  if (settings.cta_policy.empty()) settings.cta_policy = config.nccl_cta_policy;
  if (settings.ce_reduce_blocks < 0) settings.ce_reduce_blocks = config.ce_reduce_blocks;
  if (settings.ce_copy_streams <= 0) settings.ce_copy_streams = config.ce_copy_streams;
  settings.staged_copy_engines = settings.staged_copy_engines || config.ce_staged;
  if (settings.staged_sites.empty()) settings.staged_sites = config.ce_sites;
  if (settings.inline_bytes < 0) settings.inline_bytes = config.nccl_inline_bytes;
  if (settings.direct_init < 0) settings.direct_init = config.nccl_direct_init ? 1 : 0;
  return settings;
}

CommunicatorOptions communicator_defaults(const Config& config, NcclSettings nccl) {
  CommunicatorOptions o;
  o.timeout = config.timeout;
  o.flight = {.hang_warn = config.hang_warn, .dump_dir = config.flight_dir};
  o.check_collectives = config.check_collectives;
  o.nccl = nccl_settings_from(config, std::move(nccl));
  return o;
}

}  // namespace rtd
