// rtd::FSDP: the sharded strategies' state and the hooks of one training step
// (docs/sharding.md). Buffers: the fp32 master shards, the AdamW moments and
// the gradient shards of every unit lie in one flat "shard space" each (unit
// u at shard_off[u]); parameters and gradients in full live per unit
// (ZeRO-1/2) or in small pools of slots that units borrow (ZeRO-3, hybrid).
// One file past 700 lines on purpose: every hook reads and writes the one
// Impl, whose state would otherwise need a private header shared by the
// parts; what stands apart lives apart (the plan in fsdp_plan.cc, the
// offloaded host side in host_optimizer.cc, the layout in shard_layout.cc).
#include "rt_dist/fsdp.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <sstream>
#include <thread>

#include "collectives/device_memory.h"
#include "rt_dist/error.h"
#include "rt_dist/trace.h"
#include "runtime/core/log.h"
#include "sharding/fsdp_plan.h"
#include "sharding/host_optimizer.h"
#include "sharding/rank_agreement.h"
#include "sharding/shard_layout.h"
#include "sharding/shard_ops.h"
#include "sharding/slot_pool.h"

namespace rtd {
namespace {

std::atomic<int> g_instances{0};  // every rank builds its FSDPs in the same order

std::string fingerprint(const std::vector<UnitLayout>& layouts, const FSDPOptions& o, int group) {
  std::ostringstream out;
  out << to_string(o.strategy) << " over groups of " << group << ", " << layouts.size()
      << " units [";
  for (std::size_t u = 0; u < layouts.size(); ++u) {
    out << (u ? "; " : "");
    for (std::size_t i = 0; i < layouts[u].counts.size(); ++i)
      out << (i ? "," : "") << layouts[u].counts[i];
  }
  const AdamWOptions& a = o.adamw;
  out << "], params " << to_string(o.param_dtype) << ", reduce " << to_string(o.reduce_dtype)
      << (o.reshard_after_forward ? ", reshard" : ", no reshard") << ", AdamW(" << a.lr << ","
      << a.beta1 << "," << a.beta2 << "," << a.eps << "," << a.weight_decay << "), clip "
      << o.max_grad_norm << ", loss scale "
      << (o.loss_scale.dynamic ? std::to_string(o.loss_scale.initial) : "off")
      << (o.copy_engines ? ", copy engines" : "")
      << (o.update_in_backward ? ", update in backward" : "") << ", offload "
      << to_string(o.offload) << (o.delayed_update ? ", delayed update" : "");
  return out.str();
}

}  // namespace

std::string_view to_string(ShardStrategy s) {
  switch (s) {
    case ShardStrategy::kZero1:
      return "zero1";
    case ShardStrategy::kZero2:
      return "zero2";
    case ShardStrategy::kZero3:
      return "zero3";
    case ShardStrategy::kHybrid:
      return "hybrid";
  }
  return "?";
}

std::string_view to_string(Offload o) {
  switch (o) {
    case Offload::kNone:
      return "none";
    case Offload::kOptimizer:
      return "optimizer";
    case Offload::kParameters:
      return "params";
    case Offload::kNvme:
      return "nvme";
  }
  return "?";
}

bool parse_offload(std::string_view text, Offload* out) {
  for (Offload o : {Offload::kNone, Offload::kOptimizer, Offload::kParameters, Offload::kNvme}) {
    if (text == to_string(o)) {
      *out = o;
      return true;
    }
  }
  return false;
}

bool parse_shard_strategy(std::string_view text, ShardStrategy* out) {
  for (ShardStrategy s : {ShardStrategy::kZero1, ShardStrategy::kZero2, ShardStrategy::kZero3,
                          ShardStrategy::kHybrid}) {
    if (text == to_string(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

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

void FSDP::Impl::setup(Store& store, std::vector<std::vector<BufferView>>& units) {
  if (units.empty() || units[0].empty())
    throw Error(ErrorCategory::kInvalidArgument, "FSDP: no units, or a unit without parameters");
  device = units[0][0].device;
  device_index = units[0][0].device_index;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].empty())
      throw Error(ErrorCategory::kInvalidArgument,
                  "FSDP: unit " + std::to_string(u) + " has no parameters");
    for (const BufferView& p : units[u]) {
      if (p.dtype != DType::kFloat32 || p.device != device || p.count == 0) {
        throw Error(ErrorCategory::kInvalidArgument,
                    "FSDP: unit " + std::to_string(u) +
                        ": every parameter must be non-empty float32 on unit 0's device");
      }
    }
  }
  if (o.update_in_backward && (o.max_grad_norm > 0.0f || o.loss_scale.dynamic))
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP: update_in_backward needs max_grad_norm = 0 and no dynamic loss scaling "
                "(both need every gradient before any update)");
  if (!is_float_type(o.param_dtype) || !is_float_type(o.reduce_dtype))
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP: param_dtype and reduce_dtype must be float32, bfloat16 or float16");
  if (o.delayed_update &&
      (!offloads_optimizer(o.offload) || !o.update_in_backward || !shards_params()))
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP: delayed_update needs offload = optimizer or nvme, update_in_backward and "
                "zero3 or hybrid");
  if (o.offload == Offload::kNvme && o.offload_dir.empty())
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP: offload = nvme needs offload_dir, a directory on a local disk");
  if (params_on_host() && !shards_params())
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP: offloading the parameters needs zero3 or hybrid (zero1 and zero2 keep "
                "every unit's parameters on the GPU); offload the optimizer instead");
  int group = comm.size();
  if (o.strategy == ShardStrategy::kHybrid && o.shard_group_size > 0) group = o.shard_group_size;
  if (group > comm.size() || comm.size() % group != 0) {
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP: hybrid shard groups of " + std::to_string(group) + " ranks do not divide " +
                    std::to_string(comm.size()) + " ranks; set shard_group_size to a divisor");
  }
  for (auto& unit : units) {
    std::vector<std::size_t> counts;
    for (const BufferView& p : unit) counts.push_back(p.count);
    layouts.push_back(layout_unit(counts, group));
  }
  // Agree before the first collective: a rank with other units or options
  // would otherwise wait in a split or a broadcast that never matches.
  const std::string key = "fsdp/" + std::to_string(g_instances++) + "/";
  check_ranks_agree(store, key + "shape/", comm.rank(), comm.size(), fingerprint(layouts, o, group),
                    "FSDP", "every rank must declare the same units with the same FSDP options");
  check_fits(store, key + "fits/", units, group);
  shard_comm = &comm;
  if (group < comm.size()) {
    intra_owned = comm.split(comm.rank() / group, comm.rank());
    inter_owned = comm.split(comm.rank() % group, comm.rank());
    shard_comm = intra_owned.get();
    replica_comm = inter_owned.get();
  }
  if (o.broadcast_parameters) {
    for (auto& unit : units)
      for (const BufferView& p : unit) complete(*comm.broadcast(p, 0, {}), device, {});
  }
  for (const UnitLayout& l : layouts) {
    shard_off.push_back(total_shard);
    total_shard += l.shard;
  }
  if (offloads()) {
    HostOptimizerShape shape{device,        device_index,   shard_off,        {},
                             o.param_dtype, o.reduce_dtype, o.offload_threads};
    for (const UnitLayout& l : layouts) shape.shard.push_back(l.shard);
    shape.every_gradient = !o.update_in_backward;
    shape.keep_parameters = params_on_host();
    if (o.offload == Offload::kNvme) shape.state_dir = o.offload_dir;
    shape.io_threads = o.offload_io_threads;
    if (shape.threads <= 0) shape.threads = std::max(1u, std::thread::hardware_concurrency());
    host = std::make_unique<HostOptimizer>(std::move(shape));
  } else {
    master = allocate(total_shard, DType::kFloat32);
    m = allocate(total_shard, DType::kFloat32);
    v = allocate(total_shard, DType::kFloat32);
  }
  std::size_t largest_shard = 0;
  for (const UnitLayout& l : layouts) largest_shard = std::max(largest_shard, l.shard);
  if (o.update_in_backward || offloads()) {
    // One being reduced, one waiting for its update.
    reduced_slots = std::make_unique<SlotPool>(std::min(unit_count(), 2), unit_count(), [&] {
      return allocate(largest_shard, o.reduce_dtype);
    });
  } else {
    grad_shard = allocate(total_shard, o.reduce_dtype);
  }
  scalar = allocate(1, DType::kFloat32);
  for (int u = 0; u < unit_count(); ++u) {
    for (const ShardPiece& piece : pieces_in_shard(layouts[u], group_rank())) {
      const BufferView& p = units[u][piece.param];
      const BufferView src = at(p.data, DType::kFloat32, piece.param_first, piece.count);
      if (!host) {
        cast_async(
            src, at(*master, DType::kFloat32, shard_off[u] + piece.shard_offset, piece.count), {});
        continue;
      }
      float* dst = host->state(0, u) + piece.shard_offset;
      if (device == DeviceType::kCuda)
        gpu::copy_to_host(src.data, dst, src.bytes(), device_index);
      else
        std::memcpy(dst, src.data, src.bytes());
    }
  }
  std::size_t largest = 0;
  for (const UnitLayout& l : layouts) largest = std::max(largest, l.padded);
  const int units_n = unit_count();
  if (shards_params()) {
    if (params_on_host()) {
      // The shards stay on the host; each gather copies its unit's in first.
      stage_slots = std::make_unique<SlotPool>(
          std::min(units_n, 2), units_n, [&] { return allocate(largest_shard, o.param_dtype); });
      if (device == DeviceType::kCuda)
        stage_lane = std::make_unique<gpu::CopyStream>(device_index, 1);
    } else if (o.param_dtype != DType::kFloat32 || host) {
      compute_shard = allocate(total_shard, o.param_dtype);
      if (o.delayed_update) compute_shard_odd = allocate(total_shard, o.param_dtype);
      if (!host)
        cast_async(at(*master, DType::kFloat32, 0, total_shard),
                   at(*compute_shard, o.param_dtype, 0, total_shard), {});
    }
    if (host)
      for (int u = 0; u < units_n; ++u) publish(u);
    // Reshard: the unit in use and the one prefetched. A released unit's slot
    // may be gathered into at once: the gather is ordered after the caller's
    // stream, so after the products that read the slot.
    const int slots = o.reshard_after_forward ? std::min(units_n, 2) : units_n;
    param_slots = std::make_unique<SlotPool>(slots, units_n,
                                             [&] { return allocate(largest, o.param_dtype); });
  } else {
    for (int u = 0; u < units_n; ++u) {
      full_params.push_back(allocate(layouts[u].padded, o.param_dtype));
      for (std::size_t i = 0; i < units[u].size(); ++i) {
        cast_async(units[u][i],
                   at(*full_params[u], o.param_dtype, layouts[u].offsets[i], layouts[u].counts[i]),
                   {});
      }
    }
  }
  if (o.strategy == ShardStrategy::kZero1) {
    for (int u = 0; u < units_n; ++u)
      full_grads.push_back(allocate(layouts[u].padded, o.reduce_dtype));
  } else {
    // Two: backward writes one while the other is reduce-scattered.
    grad_slots = std::make_unique<SlotPool>(std::min(units_n, 2), units_n,
                                            [&] { return allocate(largest, o.reduce_dtype); });
  }
  std::vector<BufferView> gather_sources, reduce_sources;
  if (stage_slots) {
    for (int slot = 0; slot < stage_slots->slots(); ++slot)
      gather_sources.push_back(at(stage_slots->data(slot), o.param_dtype, 0, largest_shard));
  } else if (shards_params()) {
    gather_sources.push_back(compute_shard ? at(*compute_shard, o.param_dtype, 0, total_shard)
                                           : at(*master, DType::kFloat32, 0, total_shard));
    if (compute_shard_odd)
      gather_sources.push_back(at(*compute_shard_odd, o.param_dtype, 0, total_shard));
  }
  for (int u = 0; u < static_cast<int>(full_params.size()); ++u)
    gather_sources.push_back(at(*full_params[u], o.param_dtype, 0, layouts[u].padded));
  for (int u = 0; u < static_cast<int>(full_grads.size()); ++u)
    reduce_sources.push_back(at(*full_grads[u], o.reduce_dtype, 0, layouts[u].padded));
  for (int slot = 0; grad_slots && slot < grad_slots->slots(); ++slot)
    reduce_sources.push_back(at(grad_slots->data(slot), o.reduce_dtype, 0, largest));
  gatherer = shard_comm->persistent_all_gather(gather_sources, {.copy_engines = o.copy_engines});
  scatterer = shard_comm->persistent_reduce_scatter(reduce_sources, ReduceOp::kAvg,
                                                    {.copy_engines = o.copy_engines});
  gather_work.assign(units_n, nullptr);
  reduce_work.assign(units_n, nullptr);
  reduced.assign(units_n, 0);
  scale = o.loss_scale.dynamic ? o.loss_scale.initial : 1.0f;
}

void FSDP::Impl::check_fits(Store& store, const std::string& key,
                            const std::vector<std::vector<BufferView>>& units, int group) {
  if (device != DeviceType::kCuda && !offloads()) return;
  std::vector<std::vector<std::size_t>> counts;
  for (const auto& unit : units) {
    counts.emplace_back();
    for (const BufferView& p : unit) counts.back().push_back(p.count);
  }
  FSDPOptions planned = o;
  planned.shard_group_size = group;
  check_plan_fits(store, key, comm.rank(), comm.size(), FSDP::plan(counts, comm.size(), planned),
                  device == DeviceType::kCuda ? device_index : -1, o.offload_dir);
}

void FSDP::Impl::gather(int u, StreamRef stream) {
  trace::Scope scope("fsdp gather", "fsdp");
  const int slot = param_slots->acquire(u);
  if (slot < 0) {
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP: no free buffer to gather unit " + std::to_string(u) +
                    " into; call post_forward/post_backward for the units done with");
  }
  BufferView out = at(param_slots->data(slot), o.param_dtype, 0, layouts[u].padded);
  if (!stage_slots) {
    gather_work[u] = gatherer->run(gather_source(u), out, stream);
    return;
  }
  // kParameters: the shard comes in from the host (once its step has run)
  // into a staging slot whose last gather is done, and the gather follows
  // the copy on the copy stream, not the caller's.
  host->wait_update(u);
  const int st = stage_slots->acquire(u, device, stream);
  const BufferView staged = at(stage_slots->data(st), o.param_dtype, 0, layouts[u].shard);
  StreamRef after = stream;
  if (stage_lane) {
    trace::Scope copy("offload parameters to GPU", "fsdp");
    stage_lane->after(stream);
    stage_lane->to_device(host->params(u).data, staged.data, staged.bytes());
    after = stage_lane->stream();
  } else {
    std::memcpy(staged.data, host->params(u).data, staged.bytes());
  }
  gather_work[u] = gatherer->run(staged, out, after);
  stage_slots->set_busy(st, gather_work[u]);
  stage_slots->release(u);
}

void FSDP::Impl::reduce(int u, StreamRef stream) {
  trace::Scope scope("fsdp reduce", "fsdp");
  const UnitLayout& l = layouts[u];
  BufferView in = full_grads.empty()
                      ? at(grad_slots->data(grad_slots->slot_of(u)), o.reduce_dtype, 0, l.padded)
                      : at(*full_grads[u], o.reduce_dtype, 0, l.padded);
  if (host) {
    // Into a slot whose last copy to the host is done; then out to the host,
    // which accumulates the micro-steps.
    host->gradients_read(stream);
    if (reduced_slots->acquire(u, device, stream) < 0)
      throw Error(ErrorCategory::kInternal,
                  "FSDP: no free buffer for unit " + std::to_string(u) + "'s reduced gradient");
    BufferView out = reduced_grad(u);
    std::shared_ptr<Work> work = scatterer->run(in, out, stream);
    if (grad_slots) grad_slots->set_busy(grad_slots->slot_of(u), work);
    if (replica_comm) {
      complete(*work, device, stream);
      work = replica_comm->all_reduce(out, ReduceOp::kAvg, stream);
    }
    complete(*work, device, stream);
    host->take_gradient(u, out, reduced[u] > 0, stream);
    reduced_slots->release(u);
    ++reduced[u];
    return;
  }
  const bool accumulate = reduced[u] > 0;
  if (accumulate && !accum) {
    std::size_t largest = 0;
    for (const UnitLayout& each : layouts) largest = std::max(largest, each.shard);
    accum = allocate(largest, o.reduce_dtype);
  }
  if (reduced_slots && reduced_slots->acquire(u, device, stream) < 0)
    throw Error(ErrorCategory::kInternal,
                "FSDP: no free buffer for unit " + std::to_string(u) + "'s reduced gradient");
  BufferView out = accumulate ? at(*accum, o.reduce_dtype, 0, l.shard) : reduced_grad(u);
  std::shared_ptr<Work> work = scatterer->run(in, out, stream);
  if (grad_slots) grad_slots->set_busy(grad_slots->slot_of(u), work);
  if (replica_comm) {
    complete(*work, device, stream);
    work = replica_comm->all_reduce(out, ReduceOp::kAvg, stream);
  }
  if (accumulate) {
    // The shard is added into only once the first micro-step's reduction into it is done.
    if (reduce_work[u]) complete(*reduce_work[u], device, stream);
    complete(*work, device, stream);
    shard::add_into_async(shard_of(*grad_shard, o.reduce_dtype, u), out, stream);
    work = nullptr;
  }
  reduce_work[u] = work;
  ++reduced[u];
}

float FSDP::Impl::global_sum_of_squares(StreamRef stream) {
  auto* sum = static_cast<float*>(scalar->data());
  shard::sum_squares_async(at(*grad_shard, o.reduce_dtype, 0, total_shard), sum, stream);
  // Hybrid: the replicas hold the same shards, so the shard group alone sums.
  shard_comm->all_reduce(at(*scalar, DType::kFloat32, 0, 1), ReduceOp::kSum, stream)->wait();
  return shard::read_float(sum, device);
}

void FSDP::Impl::update(int u, float grad_scale, int step_number, StreamRef stream) {
  const UnitLayout& l = layouts[u];
  shard::AdamWShard s;
  s.param = shard_of(*master, DType::kFloat32, u);
  s.grad = reduced_grad(u);
  s.m = static_cast<float*>(m->data()) + shard_off[u];
  s.v = static_cast<float*>(v->data()) + shard_off[u];
  s.options = o.adamw;
  s.step = step_number;
  s.grad_scale = grad_scale;
  if (shards_params()) {
    if (compute_shard) s.out = shard_of(*compute_shard, o.param_dtype, u);
    shard::adamw_async(s, stream);
    return;
  }
  // ZeRO-1/2: the new shard goes into its place in the full parameters, which
  // are then gathered in place; the next forward waits for them.
  BufferView full = at(*full_params[u], o.param_dtype, 0, l.padded);
  s.out = at(*full_params[u], o.param_dtype, l.shard * group_rank(), l.shard);
  shard::adamw_async(s, stream);
  gather_work[u] = gatherer->run(s.out, full, stream);
}

FSDP::FSDP(Communicator& comm, Store& store, std::vector<std::vector<BufferView>> units,
           FSDPOptions options)
    : impl_(std::make_unique<Impl>(comm, options)) {
  impl_->setup(store, units);
  log::get("fsdp")->info("FSDP: {}", describe());
}

FSDP::FSDP(Context& ctx, std::vector<std::vector<BufferView>> units, FSDPOptions options)
    : FSDP(ctx.comm(), ctx.store(), std::move(units), [&] {
        if (options.strategy == ShardStrategy::kHybrid && options.shard_group_size == 0)
          options.shard_group_size = ctx.world().local_world_size;
        return options;
      }()) {}

FSDP::~FSDP() = default;

int FSDP::unit_count() const { return impl_->unit_count(); }

BufferView FSDP::param(int u, int i) const {
  const Impl& s = *impl_;
  const UnitLayout& l = s.layout_of(u, i, "param");
  if (!s.shards_params())
    return s.at(*s.full_params[u], s.o.param_dtype, l.offsets[i], l.counts[i]);
  const int slot = s.param_slots->slot_of(u);
  if (slot < 0)
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::param: unit " + std::to_string(u) +
                    " is not gathered; call pre_forward or pre_backward for it first");
  return s.at(s.param_slots->data(slot), s.o.param_dtype, l.offsets[i], l.counts[i]);
}

BufferView FSDP::grad(int u, int i) const {
  const Impl& s = *impl_;
  const UnitLayout& l = s.layout_of(u, i, "grad");
  if (!s.full_grads.empty())
    return s.at(*s.full_grads[u], s.o.reduce_dtype, l.offsets[i], l.counts[i]);
  const int slot = s.grad_slots->slot_of(u);
  if (slot < 0)
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::grad: unit " + std::to_string(u) +
                    " has no gradient buffer; call pre_backward for it first");
  return s.at(s.grad_slots->data(slot), s.o.reduce_dtype, l.offsets[i], l.counts[i]);
}

void FSDP::pre_forward(int u, StreamRef stream) {
  Impl& s = *impl_;
  s.check_unit(u, "pre_forward");
  if (s.shards_params()) {
    if (!s.param_slots->holds(u)) s.gather(u, stream);
    s.prefetch(u + 1, stream);
  }
  s.wait_params(u, stream);
}

void FSDP::post_forward(int u, StreamRef stream) {
  Impl& s = *impl_;
  s.check_unit(u, "post_forward");
  // The last unit's backward comes next: keep it (as FSDP2 keeps its root).
  if (s.shards_params() && s.o.reshard_after_forward && u + 1 < s.unit_count())
    s.param_slots->release(u);
}

void FSDP::pre_backward(int u, StreamRef stream) {
  Impl& s = *impl_;
  s.check_unit(u, "pre_backward");
  if (s.shards_params()) {
    if (!s.param_slots->holds(u)) s.gather(u, stream);
    s.prefetch(u - 1, stream);
  }
  s.wait_params(u, stream);
  // ZeRO-1: the last micro-step's reduction must have read the buffer before backward rewrites it.
  if (!s.full_grads.empty() && s.reduce_work[u]) {
    complete(*s.reduce_work[u], s.device, stream);
    s.reduce_work[u] = nullptr;
  }
  if (s.grad_slots && !s.grad_slots->holds(u)) {
    const int slot = s.grad_slots->acquire(u, s.device, stream);
    if (slot < 0)
      throw Error(ErrorCategory::kInvalidArgument,
                  "FSDP::pre_backward: unit " + std::to_string(u) +
                      ": every gradient buffer is in use; call post_backward for the units done");
    for (auto [first, last] : padding_of(s.layouts[u]))  // no gradient there: zero
      zero_async(s.at(s.grad_slots->data(slot), s.o.reduce_dtype, first, last - first), stream);
  }
}

void FSDP::post_backward(int u, StreamRef stream) {
  Impl& s = *impl_;
  s.check_unit(u, "post_backward");
  if (s.grad_slots && !s.grad_slots->holds(u))
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::post_backward: unit " + std::to_string(u) + " had no pre_backward");
  if (s.o.update_in_backward && s.reduced[u] > 0)
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::post_backward: unit " + std::to_string(u) +
                    " was already reduced this step; update_in_backward takes one micro-step "
                    "per step (call step() after each backward)");
  s.reduce(u, stream);
  if (s.grad_slots) s.grad_slots->release(u);
  if (s.shards_params()) s.param_slots->release(u);
  if (s.host && s.o.update_in_backward) {
    s.host->update_async(u, s.o.adamw, s.steps + 1, 1.0f, s.host_update_dest(u));
  } else if (s.o.update_in_backward) {
    // The units reduced before this one have had its backward to finish.
    s.update_pending(stream);
    s.pending.push_back(u);
  }
}

bool FSDP::step(StreamRef stream) {
  trace::Scope scope("fsdp optimizer step", "fsdp");
  Impl& s = *impl_;
  std::vector<int> missing;
  for (int u = 0; u < s.unit_count(); ++u) {
    if (s.reduced[u] == 0) missing.push_back(u);
  }
  if (s.host) return s.offload_step(stream, missing);
  if (s.reduced_slots && missing.empty()) {
    s.update_pending(stream);
    std::fill(s.reduced.begin(), s.reduced.end(), 0);
    ++s.steps;
    return true;
  }
  for (int u = 0; u < s.unit_count(); ++u) {
    if (s.reduce_work[u]) complete(*s.reduce_work[u], s.device, stream);
    s.reduce_work[u] = nullptr;
  }
  std::fill(s.reduced.begin(), s.reduced.end(), 0);
  if (!missing.empty()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::step: unit " + std::to_string(missing[0]) +
                    " had no post_backward this step; every unit's gradients must be reduced");
  }
  float grad_scale = 1.0f / s.scale;
  s.last_norm = 0.0f;
  if (s.o.max_grad_norm > 0.0f || s.o.loss_scale.dynamic) {
    const float sum = s.global_sum_of_squares(stream);
    if (!std::isfinite(sum) && s.o.loss_scale.dynamic) {
      log::get("fsdp")->info("FSDP: inf or nan in the gradients at loss scale {}; step skipped",
                             s.scale);
      s.scale *= s.o.loss_scale.backoff;
      s.good_steps = 0;
      return false;
    }
    s.last_norm = std::sqrt(sum) / s.scale;
    if (s.o.max_grad_norm > 0.0f)
      grad_scale *= std::min(1.0f, s.o.max_grad_norm / (s.last_norm + 1e-6f));
  }
  ++s.steps;
  for (int u = 0; u < s.unit_count(); ++u) {
    s.update(u, grad_scale, s.steps, stream);
    // The next forward starts with unit 0: gather it while the others update.
    if (u == 0 && s.shards_params()) s.prefetch(0, stream);
  }
  if (s.o.loss_scale.dynamic && ++s.good_steps == s.o.loss_scale.growth_interval) {
    s.scale *= s.o.loss_scale.growth;
    s.good_steps = 0;
  }
  return true;
}

void FSDP::Impl::after_host_steps(StreamRef stream) {
  for (int u = 0; u < unit_count(); ++u) {
    if (shards_params()) {
      if (u == 0) prefetch(0, stream);
      continue;
    }
    const UnitLayout& l = layouts[u];
    const BufferView own = host_update_dest(u);
    gather_work[u] = gatherer->run(own, at(*full_params[u], o.param_dtype, 0, l.padded), stream);
  }
}

// step() with offload: the gradients are on the host (or on their way); the
// CPU steps (those not already queued during backward), then the new
// parameters to where the gathers read them.
bool FSDP::Impl::offload_step(StreamRef stream, const std::vector<int>& missing) {
  if (o.delayed_update && missing.empty()) {
    // The next step reads what the step before this one wrote: wait for
    // those host steps only; this step's run on under the next forward.
    host->finish_until(previous_step_ticket, stream);
    previous_step_ticket = host->last_ticket();
    std::fill(reduced.begin(), reduced.end(), 0);
    ++steps;
    after_host_steps(stream);
    return true;
  }
  host->finish(stream);
  std::fill(reduced.begin(), reduced.end(), 0);
  if (!missing.empty()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::step: unit " + std::to_string(missing[0]) +
                    " had no post_backward this step; every unit's gradients must be reduced");
  }
  if (o.update_in_backward) {  // queued as each unit's gradient came in
    ++steps;
    after_host_steps(stream);
    return true;
  }
  float grad_scale = 1.0f / scale;
  last_norm = 0.0f;
  if (o.max_grad_norm > 0.0f || o.loss_scale.dynamic) {
    auto* sum = static_cast<float*>(scalar->data());
    host->put_float(host->gradient_sum_of_squares(), sum, stream);
    shard_comm->all_reduce(at(*scalar, DType::kFloat32, 0, 1), ReduceOp::kSum, stream)->wait();
    const float total = shard::read_float(sum, device);
    if (!std::isfinite(total) && o.loss_scale.dynamic) {
      log::get("fsdp")->info("FSDP: inf or nan in the gradients at loss scale {}; step skipped",
                             scale);
      scale *= o.loss_scale.backoff;
      good_steps = 0;
      return false;
    }
    last_norm = std::sqrt(total) / scale;
    if (o.max_grad_norm > 0.0f) grad_scale *= std::min(1.0f, o.max_grad_norm / (last_norm + 1e-6f));
  }
  ++steps;
  for (int u = 0; u < unit_count(); ++u)
    host->update_async(u, o.adamw, steps, grad_scale, host_update_dest(u));
  host->finish(stream);
  after_host_steps(stream);
  if (o.loss_scale.dynamic && ++good_steps == o.loss_scale.growth_interval) {
    scale *= o.loss_scale.growth;
    good_steps = 0;
  }
  return true;
}

ckpt::State FSDP::checkpoint_state(const std::vector<std::vector<ckpt::Tensor>>& params,
                                   bool for_save) {
  Impl& s = *impl_;
  if (s.host) s.host->wait_steps();  // delayed_update: the last step's may still run
  if (static_cast<int>(params.size()) != s.unit_count())
    throw Error(ErrorCategory::kInvalidArgument,
                "FSDP::checkpoint_state: names for " + std::to_string(params.size()) +
                    " units, but the engine has " + std::to_string(s.unit_count()));
  const bool saves = !for_save || !s.replica_comm || s.replica_comm->rank() == 0;
  ckpt::State state;
  const char* suffix[] = {"", ".exp_avg", ".exp_avg_sq"};
  // With offload, the states are the host's.
  const DeviceType where = s.host ? DeviceType::kCpu : s.device;
  auto base = [&](int k, int u) {  // unit u's array k: master, first and second moments
    if (s.host) return s.host->state(k, u);
    const DeviceBuffer* arrays[] = {s.master.get(), s.m.get(), s.v.get()};
    return static_cast<float*>(arrays[k]->data()) + s.shard_off[u];
  };
  for (int u = 0; u < s.unit_count(); ++u) {
    const UnitLayout& l = s.layouts[u];
    if (params[u].size() != l.counts.size())
      throw Error(ErrorCategory::kInvalidArgument,
                  "FSDP::checkpoint_state: unit " + std::to_string(u) + " has " +
                      std::to_string(l.counts.size()) + " parameters, " +
                      std::to_string(params[u].size()) + " names given");
    for (std::size_t i = 0; i < l.counts.size(); ++i) {
      std::size_t n = 1;
      for (std::int64_t d : params[u][i].shape) n *= static_cast<std::size_t>(d);
      if (n != l.counts[i])
        throw Error(ErrorCategory::kInvalidArgument,
                    "FSDP::checkpoint_state: '" + params[u][i].name + "' has " +
                        std::to_string(l.counts[i]) + " elements, its shape says " +
                        std::to_string(n));
    }
    for (int k = 0; k < 3; ++k) {
      std::vector<std::size_t> index(l.counts.size());
      for (std::size_t i = 0; i < l.counts.size(); ++i) {
        index[i] = state.tensors.size();
        state.tensors.push_back(
            ckpt::Tensor{params[u][i].name + suffix[k], DType::kFloat32, params[u][i].shape, {}});
      }
      if (!saves) continue;
      float* array = base(k, u);
      for (const ShardPiece& piece : pieces_in_shard(l, s.group_rank())) {
        if (piece.count == 0) continue;
        state.tensors[index[piece.param]].ranges.push_back(ckpt::Range{
            piece.param_first, piece.count, array + piece.shard_offset, where, s.device_index});
      }
    }
  }
  state.meta["fsdp.steps"] = std::to_string(s.steps);
  state.meta["fsdp.loss_scale"] = std::to_string(s.scale);
  state.meta["fsdp.good_steps"] = std::to_string(s.good_steps);
  return state;
}

void FSDP::after_load(const ckpt::State& loaded, StreamRef stream) {
  Impl& s = *impl_;
  // A gather still in flight (the next step's prefetch) carries the old values.
  for (auto& w : s.gather_work) {
    if (w) w->wait();
    w = nullptr;
  }
  auto number = [&](const char* key, double fallback) {
    auto it = loaded.meta.find(key);
    return it == loaded.meta.end() ? fallback : std::stod(it->second);
  };
  s.steps = static_cast<int>(number("fsdp.steps", s.steps));
  s.scale = static_cast<float>(number("fsdp.loss_scale", s.scale));
  s.good_steps = static_cast<int>(number("fsdp.good_steps", s.good_steps));
  for (int u = 0; u < s.unit_count(); ++u) {
    const UnitLayout& l = s.layouts[u];
    if (s.host) s.publish(u);
    if (s.shards_params()) {
      if (s.compute_shard && !s.host)
        cast_async(s.shard_of(*s.master, DType::kFloat32, u),
                   s.shard_of(*s.compute_shard, s.o.param_dtype, u), stream);
      s.param_slots->release(u);  // gathered again, from the loaded shards
      continue;
    }
    // ZeRO-1/2: the shard into its place in the full parameters, gathered in place.
    BufferView own = s.at(*s.full_params[u], s.o.param_dtype, l.shard * s.group_rank(), l.shard);
    if (!s.host) cast_async(s.shard_of(*s.master, DType::kFloat32, u), own, stream);
    s.gather_work[u] =
        s.gatherer->run(own, s.at(*s.full_params[u], s.o.param_dtype, 0, l.padded), stream);
  }
}

float FSDP::loss_scale() const { return impl_->scale; }
int FSDP::steps_taken() const { return impl_->steps; }
float FSDP::last_grad_norm() const { return impl_->last_norm; }
std::size_t FSDP::state_bytes() const { return impl_->bytes + scratch_bytes(); }
FSDP::OffloadTimes FSDP::offload_times() const {
  if (!impl_->host) return {};
  return {impl_->host->adamw_seconds(), impl_->host->wait_seconds(),
          impl_->host->read_wait_seconds()};
}

std::size_t FSDP::host_state_bytes() const { return impl_->host ? impl_->host->bytes() : 0; }
std::size_t FSDP::disk_state_bytes() const { return impl_->host ? impl_->host->disk_bytes() : 0; }
std::size_t FSDP::scratch_bytes() const {
  return impl_->gatherer->scratch_bytes() + impl_->scatterer->scratch_bytes();
}

std::string FSDP::gather_method() const { return impl_->gatherer->method(); }
std::string FSDP::reduce_method() const { return impl_->scatterer->method(); }

std::string FSDP::describe() const {
  const Impl& s = *impl_;
  std::ostringstream out;
  out << to_string(s.o.strategy) << ": " << s.unit_count() << " units sharded over "
      << s.shard_comm->size() << " ranks";
  if (s.replica_comm) out << ", replicated over " << s.replica_comm->size() << " groups";
  out << " (" << s.comm.backend() << ": gathers by " << s.gatherer->method() << ", reductions by "
      << s.scatterer->method() << "), params " << to_string(s.o.param_dtype) << ", reduce "
      << to_string(s.o.reduce_dtype) << ", " << s.bytes / 1048576.0
      << " MiB of model state on this rank";
  if (s.host)
    out << " and " << s.host->bytes() / 1048576.0 << " MiB in host memory (offload "
        << to_string(s.o.offload) << ")";
  if (s.host && s.host->disk_bytes() > 0)
    out << ", " << s.host->disk_bytes() / 1048576.0 << " MiB in a file in " << s.o.offload_dir;
  return out.str();
}

}  // namespace rtd
