// The nodes' settings compared at a round (nccl_settings.h judges them):
// the store I/O around compare_settings, shared by the agent and `dtrun
// doctor` across nodes.
#pragma once

#include <string>

#include "launcher/nccl_settings.h"
#include "rt_dist/store.h"

namespace rtd::launcher {

// Every node publishes the settings its workers will run with under
// dtrun/round<R>/settings/<node>, reads every node's, and judges them alike;
// node 0 logs the warnings. Returns the verdict. The host stays until every
// node has read, so that all fail with the same message.
// Every node says its settings as soon as the round starts: one that has not
// within `wait` (the agent's --heartbeat-timeout) went silent after joining,
// and the exchange throws naming it.
SettingsVerdict check_settings_across_nodes(Store& store, int round, int node_rank, int nnodes,
                                            const Settings& mine, bool host,
                                            std::chrono::milliseconds wait);

}  // namespace rtd::launcher
