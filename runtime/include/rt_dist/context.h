// rtd::init() and Context: the process's place in the job (read from the
// environment that dtrun, torchrun, Open MPI or Slurm set), its store, and its
// default communicator.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rt_dist/communicator.h"
#include "rt_dist/store.h"

namespace rtd {

// kAuto: NCCL when librt_dist was built with it and this process sees a GPU,
// else Gloo; RTD_BACKEND overrides it.
// kMpi: Open MPI's collectives, for jobs started by mpirun (docs/mpi.md).
enum class Backend { kAuto, kGloo, kNccl, kMpi };

// Per-communicator NCCL settings (ncclConfig_t); -1 or empty leaves NCCL's default.
// RTD_NCCL_* variables fill them when the trainer leaves them unset.
struct NcclSettings {
  int cga_cluster_size = -1;
  int min_ctas = -1;
  int max_ctas = -1;
  std::string net_name;
  // "default", "efficiency" (fewest thread blocks, for overlap with compute) or
  // "zero" (copy engines where NCCL can); empty: NCCL's own choice.
  std::string cta_policy;
  // Thread blocks of the copy-engine all-reduce's addition; -1: enough for the chunk.
  int ce_reduce_blocks = -1;
  // Streams the copy-engine all-reduce spreads its copies over; 0: the default
  // (one stream, peers in rotation).
  int ce_copy_streams = 0;
  // all_reduce() and reduce_scatter() of a sum or average of float32,
  // bfloat16 or float16, and all_gather() of any dtype, moving at least 1 MiB,
  // every rank on one host with peer access: staged by copy engines (the
  // input copied into a buffer of the communicator's that the peers mapped
  // once, then the persistent copy-engine collective of that buffer), so
  // arbitrary tensors get the copy-engine path. Every rank the same.
  bool staged_copy_engines = false;
  // With staged_copy_engines: each site (an operation of one count, dtype and
  // reduction) by copy engines or NCCL's kernels as measured in its first
  // calls, alike on every rank, unless overridden here:
  // "KIND[:COUNT]=METHOD,..." (KIND all_reduce, all_gather, reduce_scatter or
  // *; METHOD kernels, copy_engines or measure). Empty: RTD_CE_SITES. The
  // same on every rank.
  std::string staged_sites;
  // Collectives of at most this many bytes run on the caller's stream itself
  // instead of the communicator's: no events between the two streams (about
  // 1.5-2 us of host time a call on 2xH100), but the caller's later work on
  // that stream waits for them. -1: RTD_NCCL_INLINE_BYTES (default 1 MiB; 0: none).
  long long inline_bytes = -1;
  // The communicator's stream: 1 (or -1) at the device's highest priority,
  // so that its kernels start ahead of compute; 0 at the default priority
  // (ProcessGroupNCCL's).
  int stream_priority = -1;
  // 1: the blocking data-path communicator made directly (ncclCommInitRankConfig,
  // blocking, on a thread of its own waited for against the timeout), with no
  // nonblocking communicator and no split: a 2-GPU job reaches its first
  // all-reduce 0.6 s sooner, as soon as a raw NCCL program (411ccc3:docs/benchmarks.md).
  // A blocking init cannot be aborted while it runs, so a peer that never
  // comes leaves that thread behind (it aborts what it made if it ever
  // returns) while construction fails at the deadline as usual.
  // 0: a nonblocking init communicator, polled and abortable, and the
  // blocking one split off it. -1: RTD_NCCL_DIRECT_INIT (default 1).
  int direct_init = -1;
};

struct InitOptions {
  Backend backend = Backend::kAuto;
  NcclSettings nccl;
};

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string launcher = "none";  // "dtrun", "torchrun", "mpirun", "slurm" or "none"
};

class Context {
 public:
  virtual ~Context() = default;

  virtual const WorldInfo& world() const = 0;
  int rank() const { return world().rank; }
  int world_size() const { return world().world_size; }
  int local_rank() const { return world().local_rank; }
  // The default communicator (NCCL or Gloo, see Backend). Its GPU, under NCCL,
  // is LOCAL_RANK's and is the current CUDA device after init().
  virtual Communicator& comm() = 0;
  virtual Store& store() = 0;
  // The timeout every collective of this context's communicators runs under.
  virtual std::chrono::milliseconds timeout() const = 0;

  // In-process recovery (rt_dist/recovery.h drives these). close_comm()
  // aborts the default communicator and destroys it once its operations have
  // ended, closing its connections, so that peers blocked on this rank fail
  // at once; comm() is then an error until reopen_comm(generation) builds it
  // anew with the ranks of that generation (collective among them).
  // Whatever holds the old communicator must be gone before close_comm().
  virtual void close_comm() = 0;
  virtual void reopen_comm(int generation) = 0;
  // Aborts the default communicator from any thread, if it is still that of
  // `round` and `generation` (its operations fail; the thread that uses it
  // then closes it). For in-process recovery's watch (rt_dist/recovery.h).
  virtual void abort_comm(int round, int generation) = 0;
  // The generation this process's communicator belongs to (DTRUN_GENERATION at init).
  virtual int generation() const = 0;
  // In-process recovery after a node was lost: this worker moves to dtrun's
  // next round with a new rank and world size (the store and the default
  // communicator of that round; generation 0). world() says the new place.
  struct Placement {
    int round = 0;
    int rank = 0;
    int world_size = 1;
    int node_rank = 0;
  };
  virtual void relocate(const Placement& next) = 0;
  // Whether dtrun restarts a lost worker alone (DTRUN_RECOVERY=in-process),
  // and how long a survivor waits for that (RTD_RECOVERY_WAIT_S).
  virtual bool recovery_enabled() const = 0;
  // dtrun's round this process works in (DTRUN_ROUND, or where it moved), and
  // whether its node joined a job running with in-process recovery
  // (DTRUN_RECOVERY_JOIN: its state comes from a running worker).
  virtual int round() const = 0;
  virtual bool joining() const = 0;
  virtual std::chrono::milliseconds recovery_wait() const = 0;
};

// Reads the environment once, sets up logging, connects to the store and
// builds the default communicator. Collective: every rank of the job calls it.
// Throws rtd::Error(kConfig) naming the variable for a malformed environment.
std::shared_ptr<Context> init(const InitOptions& options = {});

}  // namespace rtd
