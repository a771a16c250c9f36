// FSDP::Impl: rtd::FSDP's state, shared by the files that implement it
// (fsdp.cc: the hooks of one step; fsdp_setup.cc: the buffers and the
// checks across ranks; fsdp_checkpoint.cc: the state a checkpoint holds).
// Private to sharding/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/device_memory.h"
#include "rt_dist/fsdp.h"
#include "sharding/host_optimizer.h"
#include "sharding/rank_agreement.h"
#include "sharding/shard_layout.h"
#include "sharding/shard_ops.h"
#include "sharding/slot_pool.h"

namespace rtd {

struct FSDP::Impl {
  Communicator& comm;
  FSDPOptions o;
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;
  std::unique_ptr<Communicator> intra_owned, inter_owned;
  Communicator* shard_comm = nullptr;    // the ranks a unit is sharded over
  Communicator* replica_comm = nullptr;  // hybrid: the same shard on the other groups
  std::vector<UnitLayout> layouts;
  std::vector<std::size_t> shard_off;  // per unit, in the shard space
  std::size_t total_shard = 0;
  std::size_t bytes = 0;

  std::unique_ptr<DeviceBuffer> master, m, v, grad_shard, compute_shard, scalar, accum;
  // delayed_update: the second compute-dtype shard. Step k (1-based) reads and
  // its host steps write compute_shards(k % 2); the two alternate.
  std::unique_ptr<DeviceBuffer> compute_shard_odd;
  std::uint64_t previous_step_ticket = 0;  // delayed_update: the last host step of the step before
  std::vector<std::unique_ptr<DeviceBuffer>> full_params;  // ZeRO-1/2: per unit
  std::vector<std::unique_ptr<DeviceBuffer>> full_grads;   // ZeRO-1: per unit
  std::unique_ptr<SlotPool> param_slots, grad_slots;       // ZeRO-3/hybrid; ZeRO-2/3 grads
  // update_in_backward: a unit's reduced gradient shard, until its update
  // (instead of grad_shard for every unit), and the units waiting for theirs.
  std::unique_ptr<SlotPool> reduced_slots;
  std::vector<int> pending;
  // Over the shard group: gathers out of the parameter shards (ZeRO-3) or the
  // full parameters (ZeRO-1/2, in place), reduce-scatters out of the full
  // gradients; set up once over those buffers.
  std::unique_ptr<PersistentShardCollective> gatherer, scatterer;
  // Offload: the states in host memory and the CPU's steps; kParameters: the
  // shards copied in for a gather (two slots, on a copy stream of their own).
  std::unique_ptr<HostOptimizer> host;
  std::unique_ptr<SlotPool> stage_slots;
  std::unique_ptr<gpu::CopyStream> stage_lane;
  std::vector<std::shared_ptr<Work>> gather_work;  // per unit: parameters arriving
  std::vector<std::shared_ptr<Work>> reduce_work;  // per unit: this step's reduction
  std::vector<int> reduced;                        // per unit: micro-steps reduced
  int steps = 0;
  float scale = 1.0f;
  int good_steps = 0;
  float last_norm = 0.0f;

  Impl(Communicator& c, FSDPOptions opts) : comm(c), o(opts) {}
  // No collective may still read or write the buffers when they are freed
  // (peers read them too, with copy engines). Errors were the caller's to see.
  ~Impl() {
    host.reset();  // its copies out write the engine's buffers
    for (auto* works : {&gather_work, &reduce_work})
      for (auto& w : *works) {
        try {
          if (w) w->wait();
        } catch (const Error&) {
        }
      }
  }

  bool shards_params() const {
    return o.strategy == ShardStrategy::kZero3 || o.strategy == ShardStrategy::kHybrid;
  }
  bool offloads() const { return o.offload != Offload::kNone; }
  bool params_on_host() const { return o.offload == Offload::kParameters; }
  // Where unit u's new parameters go after the host's step: the compute-dtype
  // shard (ZeRO-3), this rank's part of the full parameters (ZeRO-1/2), or
  // nowhere (kParameters: they stay on the host).
  BufferView host_update_dest(int u) const {
    if (params_on_host()) return BufferView{};
    if (shards_params()) return shard_of(current_compute(), o.param_dtype, u);
    return at(*full_params[u], o.param_dtype, layouts[u].shard * group_rank(), layouts[u].shard);
  }
  // The gathers' way to the full parameters after the host's steps (ZeRO-1/2
  // gather in place; ZeRO-3 prefetches unit 0).
  void after_host_steps(StreamRef stream);
  bool offload_step(StreamRef stream, const std::vector<int>& missing);
  // The compute-dtype shards this step's gathers read (and, delayed, its host steps write).
  const DeviceBuffer& current_compute() const {
    return compute_shard_odd && (steps + 1) % 2 == 1 ? *compute_shard_odd : *compute_shard;
  }
  // Unit u's compute-dtype shard from the host's master shard, where the
  // gathers read it (with the delay: into both shards; a resumed run starts
  // its delay again).
  void publish(int u) {
    host->publish(u, host_update_dest(u));
    if (compute_shard_odd) {
      const DeviceBuffer& other =
          &current_compute() == compute_shard.get() ? *compute_shard_odd : *compute_shard;
      host->publish(u, shard_of(other, o.param_dtype, u));
    }
  }
  int unit_count() const { return static_cast<int>(layouts.size()); }
  int group_rank() const { return shard_comm->rank(); }

  std::unique_ptr<DeviceBuffer> allocate(std::size_t count, DType dtype) {
    auto buf = std::make_unique<DeviceBuffer>(device, device_index, count * dtype_size(dtype));
    bytes += buf->bytes();
    zero_async(BufferView{buf->data(), count, dtype, device, device_index}, {});
    return buf;
  }
  BufferView at(const DeviceBuffer& buf, DType dtype, std::size_t first, std::size_t count) const {
    return BufferView{static_cast<char*>(buf.data()) + first * dtype_size(dtype), count, dtype,
                      device, device_index};
  }
  BufferView at(void* base, DType dtype, std::size_t first, std::size_t count) const {
    return BufferView{static_cast<char*>(base) + first * dtype_size(dtype), count, dtype, device,
                      device_index};
  }
  // Unit u's reduced gradient shard, in reduce_dtype.
  BufferView reduced_grad(int u) const {
    if (reduced_slots)
      return at(reduced_slots->data(reduced_slots->slot_of(u)), o.reduce_dtype, 0,
                layouts[u].shard);
    return shard_of(*grad_shard, o.reduce_dtype, u);
  }
  // Unit u's shard in one of the shard-space buffers.
  BufferView shard_of(const DeviceBuffer& buf, DType dtype, int u) const {
    return at(buf, dtype, shard_off[u], layouts[u].shard);
  }
  // Where the gathers of unit u read from: the compute-dtype shard.
  BufferView gather_source(int u) const {
    return compute_shard ? shard_of(current_compute(), o.param_dtype, u)
                         : shard_of(*master, DType::kFloat32, u);
  }
  // Unit u's layout, after checking that u and its parameter i exist.
  const UnitLayout& layout_of(int u, int i, const char* call) const {
    check_unit(u, call);
    if (i < 0 || i >= static_cast<int>(layouts[u].counts.size()))
      throw Error(ErrorCategory::kInvalidArgument, std::string("FSDP::") + call + ": unit " +
                                                       std::to_string(u) + " has no parameter " +
                                                       std::to_string(i));
    return layouts[u];
  }
  void check_unit(int u, const char* call) const {
    if (u < 0 || u >= unit_count()) {
      throw Error(ErrorCategory::kInvalidArgument,
                  std::string("FSDP::") + call + ": no unit " + std::to_string(u));
    }
  }

  void setup(Store& store, std::vector<std::vector<BufferView>>& units);
  // On GPUs, before anything is allocated: the plan's model states fit in
  // every rank's free memory, or every rank throws naming those that lack it.
  void check_fits(Store& store, const std::string& key,
                  const std::vector<std::vector<BufferView>>& units, int group);
  void gather(int u, StreamRef stream);
  void prefetch(int u, StreamRef stream) {
    if (u >= 0 && u < unit_count() && !param_slots->holds(u) && param_slots->has_free()) {
      gather(u, stream);
    }
  }
  void wait_params(int u, StreamRef stream) {
    if (gather_work[u]) complete(*gather_work[u], device, stream);
    gather_work[u] = nullptr;
  }
  void reduce(int u, StreamRef stream);
  float global_sum_of_squares(StreamRef stream);
  void update(int u, float grad_scale, int step_number, StreamRef stream);
  // update_in_backward: the pending units' updates, once their reductions are done.
  void update_pending(StreamRef stream) {
    for (int p : pending) {
      if (reduce_work[p]) complete(*reduce_work[p], device, stream);
      reduce_work[p] = nullptr;
      update(p, 1.0f, steps + 1, stream);
      reduced_slots->release(p);
      // The next forward starts with unit 0: gather it as soon as it is updated.
      if (p == 0 && shards_params()) prefetch(0, stream);
    }
    pending.clear();
  }
};

}  // namespace rtd
