// `dtrun doctor [job flags] [program]`: checks this node for what breaks or
// slows a distributed job (GPUs, NCCL, network, RDMA, limits, the
// rendezvous address), prints a table with one line of advice per problem,
// and returns 1 when something is an error, else 0.
#pragma once

#include <string>

#include "launcher/options.h"
#include "runtime/core/config.h"

namespace rtd::launcher::doctor {

int run_doctor(const LaunchOptions& options, const EnvMap& env);

}  // namespace rtd::launcher::doctor
