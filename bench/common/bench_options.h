// The benchmark harness's flags, nccl-tests style; one parser for every benchmark.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "rt_dist/types.h"

namespace rtd::bench {

struct BenchOptions {
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                  "all_to_all"};
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = std::size_t{1} << 30;
  std::size_t factor = 2;
  std::vector<DType> dtypes = {DType::kFloat32, DType::kBFloat16};
  int warmup = 5;
  int iters = 20;             // per timed block
  int blocks = 5;             // timed blocks; the median block is reported
  bool check = true;          // count wrong elements after the timed loop
  std::string mode = "ours";  // ours (our communicator), raw (NCCL directly), gloo, mpi (host)
  std::string json;           // write the rows here too (rank 0)
  std::string label;          // free text copied into the JSON
  // Time the start-up instead of sweeping: rank 0 prints when its process
  // started, when init() returned and when its first all-reduce completed
  // (Unix milliseconds), then the program ends (bench/startup_time.sh).
  bool startup = false;
  // Sample rank 0's host call stacks while the runner's last variant runs
  // (HostSampler; bench/host_profile.py names them) and write them here.
  std::string sample_host;
  std::string sample_variant;  // the variant sampled (--sample-variant; empty: the last)
  bool sample_wall = false;    // --sample-clock wall: by elapsed time, not the thread's CPU time
  // How raw NCCL's communicator is made: "plain" (ncclCommInitRank on the
  // calling thread) or "thread" (ncclCommInitRankConfig with the default
  // config on a thread of its own, as our communicator's direct init does) or
  // "ours" (none made: raw calls on our communicator's own NCCL handle).
  std::string raw_init = "plain";
  // Paired mode: a row "raw_delay", raw_end_drv and then this many ns of
  // host time that touch no memory (0: no such row): what a host delay of
  // that size costs a call, against what our layer's costs in place.
  long long host_delay_ns = 0;
};

// Throws std::invalid_argument naming the flag.
BenchOptions parse_bench_options(int argc, char** argv);
std::string bench_usage();

}  // namespace rtd::bench
