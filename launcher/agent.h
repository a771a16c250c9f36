// run_agent: one node's dtrun: host the rendezvous (node rank 0), join it,
// start and supervise the workers, restart them locally, and agree with the
// other nodes on how the job ended. Returns dtrun's exit code.
#pragma once

#include "launcher/options.h"
#include "runtime/core/config.h"

namespace rtd::launcher {

int run_agent(const LaunchOptions& options, const LauncherConfig& env_config,
              const EnvMap& parent_env);

}  // namespace rtd::launcher
