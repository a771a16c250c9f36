// rtd::FSDP: the hooks of one training step (docs/sharding.md). Buffers: the
// fp32 master shards, the AdamW moments and the gradient shards of every
// unit lie in one flat "shard space" each (unit u at shard_off[u]);
// parameters and gradients in full live per unit (ZeRO-1/2) or in small pools
// of slots that units borrow (ZeRO-3, hybrid). The state is FSDP::Impl
// (fsdp_impl.h); its set-up is in fsdp_setup.cc, its checkpoint state in
// fsdp_checkpoint.cc, the plan in fsdp_plan.cc, the offloaded host side in
// host_optimizer.cc.
#include "rt_dist/fsdp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "collectives/device_memory.h"
#include "rt_dist/error.h"
#include "rt_dist/trace.h"
#include "runtime/core/log.h"
#include "sharding/fsdp_impl.h"
#include "sharding/fsdp_plan.h"
#include "sharding/host_optimizer.h"
#include "sharding/shard_layout.h"
#include "sharding/shard_ops.h"
#include "sharding/slot_pool.h"

namespace rtd {

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
