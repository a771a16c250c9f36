// Runner: what the collective benchmark needs from one way of running
// collectives (our communicator on GPU or CPU, or NCCL called directly), so
// that every mode goes through the same sizes, checks and report.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "bench/common/bench_options.h"
#include "rt_dist/types.h"

namespace rtd::bench {

struct OpBuffers {
  void* in;
  void* out;
  std::size_t in_count;
  std::size_t out_count;
  DType dtype;
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string describe() const = 0;
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  // Runs iters operations back to back; returns microseconds per operation.
  virtual double time(const std::string& op, const OpBuffers& b, int iters) = 0;
  // The host's time to issue one operation in the last time() (before the
  // device finished them), microseconds; -1 where the two are not apart.
  virtual double host_us() const { return -1; }
  // All ranks arrive before any leaves (and the device is idle).
  virtual void barrier() = 0;
  // The ways this runner times an operation ("" alone for most; mode
  // "paired": raw NCCL, raw NCCL with what our layer adds on the device, and
  // ours, in one process on the same buffers), and which of them time() uses.
  virtual std::vector<std::string> variants() const { return {""}; }
  virtual void select(std::size_t variant) { (void)variant; }
};

// Our Gloo (mode "gloo") or MPI (mode "mpi", under mpirun) communicator on host buffers.
std::unique_ptr<Runner> make_host_runner(const std::string& mode);
// mode "ours" (our NCCL communicator), "raw" (NCCL calls, no layer of ours) or
// "paired" (both in one process, timed in alternating blocks).
// raw_init: how raw NCCL's communicator is made (BenchOptions::raw_init).
std::unique_ptr<Runner> make_gpu_runner(const std::string& mode, const std::string& raw_init,
                                        long long host_delay_ns);

}  // namespace rtd::bench
