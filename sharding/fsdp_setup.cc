// rtd::FSDP's construction: the options and units checked, the same on
// every rank (a fingerprint compared through the store), and every buffer
// of the shard space, the full parameters and gradients and the slot pools
// allocated up front (docs/sharding.md).
#include <algorithm>
#include <atomic>
#include <sstream>

#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "sharding/fsdp_impl.h"
#include "sharding/fsdp_plan.h"
#include "sharding/rank_agreement.h"

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

}  // namespace rtd
