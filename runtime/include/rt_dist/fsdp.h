// rtd::FSDP: data parallelism that shards the model states over the ranks
// (ZeRO-1/2/3 and hybrid sharding), with mixed precision, an AdamW that
// updates only this rank's shard, gradient clipping by global norm and
// dynamic loss scaling. See docs/sharding.md.
//
// The trainer declares units (a layer or a group of layers: the parameters
// that are gathered and reduced together) and tells the engine where it is:
//   for u in units:            pre_forward(u); ...forward of u with param(u, i)...; post_forward(u)
//   for u in reversed(units):  pre_backward(u); ...write grad(u, i)...; post_backward(u)
//   step();                    after one or more micro-steps (gradients accumulate)
// post_backward(u) starts the reduce-scatter of u's gradients while backward
// goes on; pre_forward/pre_backward gather the parameters of u (kZero3,
// kHybrid) and prefetch the next unit's.
//
// Collective: every rank builds the same FSDP (same units, same shapes, same
// options; a mismatch is rtd::Error(kInvalidArgument) on every rank) and calls
// the hooks in the same order. Not thread-safe: one thread drives it.
// Streams: GPU work is ordered on the stream given to each call and never
// blocks the host, except step() with clipping or loss scaling, which reads
// one number back.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rt_dist/checkpoint.h"
#include "rt_dist/communicator.h"
#include "rt_dist/context.h"
#include "rt_dist/store.h"
#include "rt_dist/types.h"

namespace rtd {

enum class ShardStrategy {
  kZero1,   // optimizer state (fp32 master weights, AdamW moments) sharded
  kZero2,   // + gradients: reduced into the shard as backward produces them
  kZero3,   // + parameters: gathered per unit before use, released after
  kHybrid,  // kZero3 inside a shard group (a node), replicas across groups
};
std::string_view to_string(ShardStrategy strategy);
// "zero1", "zero2", "zero3", "hybrid"; false for anything else.
bool parse_shard_strategy(std::string_view text, ShardStrategy* out);

// Where the model states live (docs/offload.md). kOptimizer: the
// fp32 master shards, AdamW's moments and the reduced gradient shards in host
// memory, AdamW stepped on the CPU; the GPU keeps the parameter shards in the
// compute dtype. kParameters (kZero3, kHybrid): those parameter shards on the
// host too, copied in for each gather. kNvme: as kOptimizer, but the fp32
// master shards and moments in a file on a local disk (FSDPOptions::
// offload_dir), a window of a few units of them in host memory.
enum class Offload { kNone, kOptimizer, kParameters, kNvme };
std::string_view to_string(Offload offload);
// "none", "optimizer", "params", "nvme"; false for anything else.
bool parse_offload(std::string_view text, Offload* out);

struct AdamWOptions {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};

// Dynamic loss scaling: the trainer multiplies its loss by loss_scale(); a
// step whose gradients hold an inf or nan on any rank is skipped on every
// rank and the scale multiplied by backoff; after growth_interval good steps
// in a row it is multiplied by growth.
struct LossScaleOptions {
  bool dynamic = false;
  float initial = 65536.0f;
  int growth_interval = 2000;
  float growth = 2.0f;
  float backoff = 0.5f;
};

struct FSDPOptions {
  ShardStrategy strategy = ShardStrategy::kZero3;
  // kZero3/kHybrid: release a unit's gathered parameters after its forward and
  // gather them again for its backward. false keeps them from forward to
  // backward (ZeRO-2's memory for fewer gathers).
  bool reshard_after_forward = true;
  // The parameters the trainer computes with (param(u, i)): float32, bfloat16 or float16,
  // cast from the fp32 master shards.
  DType param_dtype = DType::kFloat32;
  // The gradients the trainer writes (grad(u, i)) and the wire: float32, bfloat16
  // or float16 (with float16, use loss_scale.dynamic: small gradients underflow).
  DType reduce_dtype = DType::kFloat32;
  AdamWOptions adamw;
  float max_grad_norm = 0.0f;  // > 0: clip by the global norm over every shard
  LossScaleOptions loss_scale;
  // kHybrid: ranks per shard group, consecutive ranks; 0: the ranks of one node
  // (LOCAL_WORLD_SIZE) where built from a Context, else every rank.
  int shard_group_size = 0;
  bool broadcast_parameters = true;  // rank 0's initial parameters win
  // Update each unit's shard as soon as its gradient is reduced (during
  // backward, one unit behind, so that the reduction has finished) instead of
  // all at step(): no gradient shard then outlives its unit, which saves
  // (units - 2) gradient shards of memory. Needs max_grad_norm == 0 and no
  // dynamic loss scaling (both need every gradient before any update) and one
  // micro-step per step; step() then finishes the last units.
  bool update_in_backward = false;
  // NCCL, the ranks of a shard group on one host with peer access: gather and
  // reduce-scatter with copy engines, leaving the SMs to forward and backward
  // (persistent_all_gather / persistent_reduce_scatter). Every rank the same.
  bool copy_engines = true;
  // Offload (every rank the same). With update_in_backward, each unit's CPU
  // step runs while backward goes on; otherwise all of them in step().
  Offload offload = Offload::kNone;
  int offload_threads = 0;  // the host AdamW's threads; 0: one per core
  // kNvme: the directory of the states' file (a local disk; each rank makes
  // its own file there, unlinked at once). Not compared between ranks.
  std::string offload_dir;
  // kNvme: threads moving the file, each with one 8 MiB request in flight;
  // 0: kStateIoThreads (docs/sharding.md says how it was chosen).
  int offload_io_threads = 0;
  // Delayed parameter update (kOptimizer, update_in_backward, kZero3 or
  // kHybrid): step t+1's forward and backward compute with the parameters of
  // step t-1, so that the host's steps of step t run under them instead of
  // before the next forward. The GPU holds a second compute-dtype shard. Off
  // by default: it changes the trajectory (gradients one step stale).
  bool delayed_update = false;
};

// [Memory plan] What an FSDP engine allocates for the model states on each
// rank, computed without building one: on any machine, for any world size,
// from the units' parameter counts and the options (FSDP::plan). It is the
// engine's own arithmetic, item by item: an engine's state_bytes() equals
// plan(...).total() plus its collectives' scratch_bytes(). Not in it: the
// collectives' scratch (copy engines: up to a slot per peer of the largest
// unit), the trainer's activations and its own copies of the parameters,
// the CUDA context, NCCL's buffers and the allocator's rounding.
struct FSDPMemoryPlan {
  struct Item {
    std::string what;  // "fp32 master shards"
    std::size_t bytes = 0;
    // On the engine's device, in host memory (offload) or in a file (kNvme).
    enum class Place { kDevice, kHost, kDisk } where = Place::kDevice;
  };
  std::vector<Item> items;
  int shard_ranks = 1;             // the ranks a unit is sharded over
  std::size_t total() const;       // of the items on the engine's device
  std::size_t host_total() const;  // of the items in host memory
  std::size_t disk_total() const;  // of the items in a file
  // A line per item ("  fp32 master shards      128.0 MiB") and the total.
  std::string table() const;
};

class FSDP {
 public:
  // The memory plan of an engine over world_size ranks whose unit u holds
  // parameters of unit_counts[u][i] float32 elements. kHybrid shards over
  // options.shard_group_size ranks (set it to the ranks per node: a Context
  // would). Throws rtd::Error(kInvalidArgument) for what the engine refuses.
  static FSDPMemoryPlan plan(const std::vector<std::vector<std::size_t>>& unit_counts,
                             int world_size, const FSDPOptions& options);

  // units[u]: the initial parameters of unit u (float32, all on one device);
  // the engine copies what it keeps, and the trainer may free them afterwards.
  FSDP(Communicator& comm, Store& store, std::vector<std::vector<BufferView>> units,
       FSDPOptions options = {});
  FSDP(Context& ctx, std::vector<std::vector<BufferView>> units, FSDPOptions options = {});
  ~FSDP();
  FSDP(const FSDP&) = delete;
  FSDP& operator=(const FSDP&) = delete;

  int unit_count() const;
  // Parameter i of unit u in param_dtype: valid between pre_forward(u) and
  // post_forward(u), and between pre_backward(u) and post_backward(u).
  BufferView param(int unit, int i) const;
  // Where backward writes (overwrites) parameter i's gradient, in reduce_dtype:
  // valid between pre_backward(u) and post_backward(u).
  BufferView grad(int unit, int i) const;

  void pre_forward(int unit, StreamRef stream = {});
  void post_forward(int unit, StreamRef stream = {});
  void pre_backward(int unit, StreamRef stream = {});
  // Unit u's gradients are final once the work queued on stream is done: their
  // average over ranks is reduced into this rank's shard (added to it after
  // the first micro-step of a step).
  void post_backward(int unit, StreamRef stream = {});
  // Finishes every reduction, then updates this rank's shards with AdamW
  // (clipped and unscaled as the options say) and makes the new parameters
  // available to the next forward. Returns false where the step was skipped
  // (loss scaling found an inf or nan). The next micro-step starts a new step.
  bool step(StreamRef stream = {});

  // The engine's state as checkpoint tensors (rt_dist/checkpoint.h), named
  // after params[u][i] (a name and the parameter's shape; the shape's elements
  // must be its count): the fp32 master weights under that name, AdamW's
  // moments under name + ".exp_avg" and ".exp_avg_sq", each as the ranges this
  // rank's shards hold, pointing into the engine's own shards (on the host
  // or the GPU; the Checkpointer copies GPU ranges through host memory, so
  // the step's work must have finished). for_save: with
  // hybrid sharding only the first replica group saves (every rank loads).
  // meta holds "fsdp.steps", "fsdp.loss_scale" and "fsdp.good_steps". Call
  // between steps; after a load, call after_load().
  ckpt::State checkpoint_state(const std::vector<std::vector<ckpt::Tensor>>& params, bool for_save);
  // The loaded shards become the parameters the next forward computes with;
  // the step count and loss scale come from `loaded`'s meta.
  void after_load(const ckpt::State& loaded, StreamRef stream = {});

  float loss_scale() const;
  int steps_taken() const;  // AdamW steps applied (skipped ones not counted)
  // The global gradient norm the last step() measured (before clipping); 0 when
  // neither clipping nor loss scaling asked for it.
  float last_grad_norm() const;
  // Bytes of device (or host) memory the engine holds for the model states:
  // master shards, moments, gradient shards and buffers, gathered parameters,
  // and the collectives' scratch.
  std::size_t state_bytes() const;
  // Bytes of host memory the engine holds with offload (FSDP::plan's host_total).
  std::size_t host_state_bytes() const;
  // Bytes of the states' file with offload = nvme (FSDP::plan's disk_total).
  std::size_t disk_state_bytes() const;
  // With offload, since the engine was built: seconds of AdamW on the host
  // (on its own thread, mostly while backward ran), and seconds the caller's
  // thread waited in step() for host steps still running (exposed, unless
  // the GPU still had queued work to do). Zero without offload.
  // With nvme, read_wait_s: seconds the host steps waited for their states
  // from the disk (beyond what the read-ahead hid).
  struct OffloadTimes {
    double host_adamw_s = 0.0, step_wait_s = 0.0, read_wait_s = 0.0;
  };
  OffloadTimes offload_times() const;
  // Of state_bytes(), the gathers' and reductions' own scratch (0 but with
  // copy engines); the rest is FSDP::plan's total.
  std::size_t scratch_bytes() const;
  // The strategy, the group layout, how the shards move, and state_bytes().
  std::string describe() const;
  // How the shards move: "copy engines", or "all_gather" / "reduce_scatter".
  std::string gather_method() const;
  std::string reduce_method() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rtd
