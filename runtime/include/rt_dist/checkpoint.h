// Sharded checkpoints (docs/checkpoints.md). Every rank declares the same
// tensors (name, dtype, global shape) and, for each, the element ranges it
// holds: a DDP replica's slice, a ZeRO shard's pieces. save() writes every
// rank's ranges into one directory per checkpoint, with a manifest and a
// CRC-32C per piece, and commits it atomically; load() fills every rank's
// ranges from whatever ranks saved them, so that a checkpoint saved by N
// ranks loads on M, and across strategies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rt_dist/store.h"
#include "rt_dist/types.h"
#include "rt_dist/work.h"

namespace rtd::ckpt {

// Elements [first, first + count) of a tensor (flattened, row-major), held
// at `data`: the source of a save, the destination of a load. On a GPU
// (device kCuda) the Checkpointer copies through host memory; the work that
// writes or reads the buffer must have finished (between steps).
struct Range {
  std::size_t first = 0;
  std::size_t count = 0;
  void* data = nullptr;
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;
};

struct Tensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;  // global; the same on every rank
  std::vector<Range> ranges;        // this rank's part (may be empty)
};

struct State {
  std::vector<Tensor> tensors;
  std::map<std::string, std::string> meta;  // loss scale, RNG, data position, the trainer's own
};

struct Options {
  std::string dir;    // holds step_<N>/ directories and the `latest` pointer
  int keep_last = 3;  // older checkpoints are removed after a commit (0: keep all)
  // Pieces larger than this are split, so that a rank that needs part of a
  // range reads (and checks) little more than that part.
  std::size_t piece_bytes = 64u << 20;
  // Pieces each rank writes or reads at once (each thread also computes or
  // checks its pieces' CRC-32C): a disk reads and writes faster with several
  // large requests in flight than with one.
  int io_threads = 4;
  // A save that fails (a full disk, a rank that cannot write) throws from
  // save() or the next call after save_async(); with this set it is logged
  // instead and training goes on (its leftovers are removed either way, and
  // the checkpoints before it stay loadable).
  bool continue_after_failed_save = false;
  // load() checks every piece before it writes any range, so that a
  // checkpoint that fails leaves the state as it was: each piece is read
  // twice (the second time from the page cache). Off: one pass, and a
  // failed load may leave some ranges written.
  bool check_before_load = true;
};

// Thrown by load() and the tools when a checkpoint cannot be used: the message
// names the file, the tensor and what is wrong.
class Checkpointer {
 public:
  // store: shared by the ranks (the context's); rank / world_size: this job's.
  // One Checkpointer per directory per store: the ranks agree through keys
  // named after the directory and the count of calls.
  Checkpointer(Store& store, int rank, int world_size, Options options);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective. Writes this rank's ranges and, once every rank has, commits
  // step_<step>/ and points `latest` at it; returns when it is durable. A
  // crash at any moment leaves the previous checkpoint loadable; saving a
  // step again replaces it in one step (there is no moment with neither).
  // The first save takes the directory for this job (a lock in <dir>/.lock
  // naming the job's rank 0): another job's save there fails, naming it.
  void save(std::int64_t step, const State& state);

  // Collective, asynchronous: copies this rank's ranges into host memory the
  // Checkpointer owns and returns; a background thread then saves them as
  // save() does, while training goes on. The next save, save_async, load or
  // wait() first waits for it, and throws its error there: none is lost.
  // Ranges on a GPU go into pinned memory on a side stream of the
  // Checkpointer's, at the link's speed, without blocking the host: the
  // copies start after the work already queued on `stream` (the legacy
  // default stream when none is given), and work queued on `stream` after
  // this call waits for them, so the next step cannot change the state
  // while it is copied. Ranges in host memory are copied before the call returns.
  void save_async(std::int64_t step, const State& state, StreamRef stream = {});
  // Waits for the background save, if one runs; throws its error.
  void wait();

  // Collective. Fills every range of `state` (and its meta) from the newest
  // checkpoint every rank can read and verify; with fallback, an unreadable
  // one is skipped for the one before (every rank agrees which). Returns its
  // step, or nothing when the directory holds no checkpoint. Every piece is
  // checked before any range is written (Options::check_before_load): a
  // checkpoint that fails leaves the ranges as they were. newest: consider
  // only the checkpoints of this step and older (a caller that read one's
  // manifest first loads that one, or with fallback, an older one).
  std::optional<std::int64_t> load(State& state, bool fallback = true,
                                   std::optional<std::int64_t> newest = std::nullopt);

 private:
  void save_now(std::int64_t step, const State& state);
  void failed(std::int64_t step, const std::string& why);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The steps of the committed checkpoints in dir, newest first.
std::vector<std::int64_t> list_checkpoints(const std::string& dir);

}  // namespace rtd::ckpt
