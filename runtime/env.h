// detect_world: where this process sits in the job, from the launcher's
// variables (dtrun/torchrun, then Open MPI, then Slurm; none: a world of one).
#pragma once

#include "collectives/factory.h"
#include "rt_dist/context.h"
#include "runtime/core/config.h"

namespace rtd {

// Throws rtd::Error(kConfig) naming the variable when values are missing or
// inconsistent (RANK >= WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, ...).
WorldInfo detect_world(const Config& config);

// Where this rank's CPU collectives listen: the node address dtrun found,
// loopback when every rank is on this host, else this host's name.
std::string data_host(const Config& config, const WorldInfo& world);
// The default communicator's backend: RTD_BACKEND, else the caller's choice,
// else NCCL when a GPU is visible, else Open MPI's under mpirun (a world of
// more than one), else Gloo.
std::string choose_backend(const Config& config, const InitOptions& options,
                           const WorldInfo& world);

// The NCCL settings the trainer left unset, filled from RTD_NCCL_* and RTD_CE_*.
NcclSettings nccl_settings_from(const Config& config, NcclSettings settings = {});

// What the configuration says of every communicator this process makes: its
// timeout, the flight recorder's options, the collective check and the NCCL
// settings (those the caller left unset). The caller fills in the rest.
CommunicatorOptions communicator_defaults(const Config& config, NcclSettings nccl = {});

}  // namespace rtd
