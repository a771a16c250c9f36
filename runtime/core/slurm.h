// Reading Slurm's compressed lists, for jobs that srun starts (the runtime
// alone, or one dtrun per node): which host is the step's first, and how
// many tasks run on a node.
#pragma once

#include <string>

namespace rtd::slurm {

// The first host of a hostlist such as "gpu[003-010,015],login1" ("gpu003").
// Throws rtd::Error(kConfig) naming the list when it cannot be read.
std::string first_host(const std::string& nodelist);

// Tasks on node `node` (0-based) of a list such as "4(x2),3" (4, 4, 3).
// Throws rtd::Error(kConfig) when the list is malformed or too short.
int tasks_on_node(const std::string& tasks_per_node, int node);

// The port a job's store (or dtrun's rendezvous) listens on under srun when
// MASTER_PORT does not say: 20000 + (job id mod 2000) * 10 + (step id mod 10),
// the same on every node of the step, different for the steps of a job and,
// mostly, for jobs that share a node.
int default_port(int job_id, int step_id);

}  // namespace rtd::slurm
