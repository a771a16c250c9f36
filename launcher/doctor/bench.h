// `dtrun doctor --bench`: after the checks, dtrun starts the job's workers
// as itself ("dtrun __doctor_bench"), and they time a short all-reduce
// through our communicator (NCCL on GPUs, else Gloo): across every worker,
// and within each node. Rank 0 prints the bus bandwidths against what the
// node's links should give, and names a node whose own is far below the
// others'.
#pragma once

namespace rtd::launcher::doctor {

inline constexpr const char* kBenchWorkerArg = "__doctor_bench";

// The worker's side; returns its exit code (1 when a figure is far below
// what the links should give).
int run_bench_worker();

}  // namespace rtd::launcher::doctor
