// rtd::DDP: the bucket state machine of one training step (docs/ddp.md).
#include "rt_dist/ddp.h"

#include <atomic>
#include <sstream>

#include "collectives/device_memory.h"
#include "rt_dist/error.h"
#include "rt_dist/trace.h"
#include "runtime/core/log.h"
#include "sharding/bucket_plan.h"
#include "sharding/rank_agreement.h"

namespace rtd {
namespace {

// What every rank must agree on: the parameters' shapes and the options that
// decide what goes on the wire. wire_registered: per bucket, 'r' where its wire
// memory is registered, '-' where not.
std::string shape_fingerprint(const std::vector<BufferView>& params, const DDPOptions& options,
                              const std::string& wire_registered) {
  std::ostringstream out;
  out << params.size() << " parameters [";
  for (std::size_t i = 0; i < params.size(); ++i) out << (i ? "," : "") << params[i].count;
  out << "] of " << to_string(params[0].dtype) << ", " << to_string(options.grad_dtype)
      << " gradients reduced in " << to_string(options.reduce_dtype)
      << (options.copy_engines ? " (copy engines allowed)" : " (copy engines off)")
      << " in buckets of " << options.first_bucket_mb << "/" << options.bucket_mb << " MB";
  if (wire_registered.find('r') != std::string::npos) {
    out << " with registered buckets [" << wire_registered << "]";
  }
  return out.str();
}

// A bucket's memory: registered with the communicator when asked for and the
// backend has it, else a plain DeviceBuffer (owned through the same pointer).
std::shared_ptr<void> allocate_bucket(Communicator& comm, bool want_registered, DeviceType device,
                                      int device_index, std::size_t bytes, bool* registered) {
  if (want_registered && device == DeviceType::kCuda) {
    try {
      if (auto mem = comm.allocate_registered(bytes)) {
        *registered = true;
        return mem;
      }
    } catch (const Error& e) {  // plain memory; the cross-rank check catches a disagreement
      log::get("ddp")->warn("DDP: registered bucket memory unavailable, using plain memory: {}",
                            e.what());
    }
  }
  *registered = false;
  auto plain = std::make_shared<DeviceBuffer>(device, device_index, bytes);
  return std::shared_ptr<void>(plain, plain->data());
}

}  // namespace

struct DDP::Impl {
  Communicator& comm;
  DDPOptions options;
  std::vector<BufferView> params;
  DeviceType device;
  int device_index;
  BucketPlan plan;
  std::vector<std::shared_ptr<void>> grads;      // per bucket, grad_dtype
  std::vector<std::shared_ptr<void>> wire;       // per bucket, reduce_dtype where it differs
  std::string wire_registered;                   // per bucket: 'r' registered wire memory, '-' not
  std::vector<bool> ready;                       // per parameter, this step
  std::vector<int> pending;                      // per bucket, parameters not ready yet
  std::unique_ptr<PersistentAllReduce> reducer;  // over the wire views, one per bucket
  std::vector<std::shared_ptr<Work>> works;
  std::vector<bool> completed;  // per bucket: the caller's stream already waits for it
  int next_launch = 0;
  bool no_sync = false;

  Impl(Communicator& c, DDPOptions o, std::vector<BufferView> p)
      : comm(c), options(o), params(std::move(p)) {}

  BufferView bucket_view(int b) const {
    return BufferView{grads[b].get(), plan.bucket_counts[b], options.grad_dtype, device,
                      device_index};
  }
  BufferView wire_view(int b) const {
    return BufferView{wire[b].get(), plan.bucket_counts[b], options.reduce_dtype, device,
                      device_index};
  }
  bool cast_on_wire() const { return options.reduce_dtype != options.grad_dtype; }

  void reset_step() {
    std::fill(ready.begin(), ready.end(), false);
    for (std::size_t b = 0; b < pending.size(); ++b)
      pending[b] = static_cast<int>(plan.members[b].size());
    works.assign(pending.size(), nullptr);
    completed.assign(pending.size(), false);
    next_launch = 0;
  }

  void complete_bucket(int b, StreamRef stream) {
    if (completed[b]) return;
    complete(*works[b], device, stream);
    if (cast_on_wire()) cast_async(wire_view(b), bucket_view(b), stream);
    completed[b] = true;
  }

  // Buckets start strictly in order, so that every rank issues the same
  // sequence of collectives whatever order its gradients became ready in.
  void launch_ready(StreamRef stream) {
    while (next_launch < static_cast<int>(pending.size()) && pending[next_launch] == 0) {
      int b = next_launch++;
      trace::Scope scope("ddp bucket", "ddp");
      if (cast_on_wire()) cast_async(bucket_view(b), wire_view(b), stream);
      works[b] = reducer->run(b, stream);
    }
  }

  void check_same_model(Store& store) {
    // Numbered per rank in this store: every rank builds its DDPs in the same
    // order, and a store of a new generation (rt_dist/recovery.h) counts from 0.
    const std::int64_t n =
        store.add("ddp/count/" + std::to_string(comm.size()) + "/" + std::to_string(comm.rank()),
                  1) -
        1;
    check_ranks_agree(store, "ddp/" + std::to_string(n) + "/shape/", comm.rank(), comm.size(),
                      shape_fingerprint(params, options, wire_registered), "DDP",
                      "every rank must build the same model with the same DDP options");
  }
};

DDP::DDP(Communicator& comm, Store& store, std::vector<BufferView> params, DDPOptions options)
    : impl_(std::make_unique<Impl>(comm, options, std::move(params))) {
  Impl& s = *impl_;
  if (s.params.empty()) throw Error(ErrorCategory::kInvalidArgument, "DDP: no parameters");
  s.device = s.params[0].device;
  s.device_index = s.params[0].device_index;
  std::vector<std::size_t> counts;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    const BufferView& p = s.params[i];
    if (!is_float_type(p.dtype) || p.dtype != s.params[0].dtype || p.device != s.device) {
      throw Error(ErrorCategory::kInvalidArgument,
                  "DDP: parameter " + std::to_string(i) +
                      " must be float32, bfloat16 or float16, of parameter 0's dtype and on its "
                      "device");
    }
    counts.push_back(p.count);
  }
  if (!is_float_type(options.grad_dtype) || !is_float_type(options.reduce_dtype)) {
    throw Error(ErrorCategory::kInvalidArgument,
                "DDP: grad_dtype and reduce_dtype must be float32, bfloat16 or float16");
  }
  const std::size_t grad_size = dtype_size(options.grad_dtype);
  s.plan =
      plan_buckets(counts, grad_size, static_cast<std::size_t>(options.first_bucket_mb * (1 << 20)),
                   static_cast<std::size_t>(options.bucket_mb * (1 << 20)));
  // What goes on the wire is registered: the gradient buckets, or their casts.
  for (std::size_t b = 0; b < s.plan.bucket_counts.size(); ++b) {
    bool ok = false;
    s.grads.push_back(allocate_bucket(comm, options.register_buckets && !s.cast_on_wire(), s.device,
                                      s.device_index, s.plan.bucket_counts[b] * grad_size, &ok));
    zero_async(s.bucket_view(static_cast<int>(b)), {});
    if (s.cast_on_wire()) {
      s.wire.push_back(allocate_bucket(comm, options.register_buckets, s.device, s.device_index,
                                       s.plan.bucket_counts[b] * dtype_size(options.reduce_dtype),
                                       &ok));
    }
    s.wire_registered += ok ? 'r' : '-';
  }
  // After allocating, so that ranks whose registration differs fail here too.
  s.check_same_model(store);
  std::vector<BufferView> wire_views;
  for (int b = 0; b < static_cast<int>(s.grads.size()); ++b)
    wire_views.push_back(s.cast_on_wire() ? s.wire_view(b) : s.bucket_view(b));
  s.reducer = comm.persistent_all_reduce(std::move(wire_views), ReduceOp::kAvg,
                                         {.copy_engines = options.copy_engines});
  s.ready.assign(s.params.size(), false);
  s.pending.assign(s.plan.bucket_counts.size(), 0);
  s.reset_step();
  if (options.broadcast_parameters) {
    for (const BufferView& p : s.params) complete(*comm.broadcast(p, 0, {}), s.device, {});
  }
  log::get("ddp")->info(
      "DDP: {} parameters in {} buckets ({} MB first, {} MB cap), {} gradients reduced in {} by "
      "{}{}",
      s.params.size(), s.plan.bucket_counts.size(), options.first_bucket_mb, options.bucket_mb,
      to_string(options.grad_dtype), to_string(options.reduce_dtype), s.reducer->method(),
      s.wire_registered.find('-') == std::string::npos ? ", registered buckets" : "");
}

DDP::~DDP() = default;

BufferView DDP::grad(int i) const {
  const Impl& s = *impl_;
  if (i < 0 || i >= static_cast<int>(s.params.size())) {
    throw Error(ErrorCategory::kInvalidArgument, "DDP::grad: no parameter " + std::to_string(i));
  }
  const BucketSlot& slot = s.plan.slots[i];
  auto* base = static_cast<char*>(s.grads[slot.bucket].get());
  return BufferView{base + slot.offset * dtype_size(s.options.grad_dtype), s.params[i].count,
                    s.options.grad_dtype, s.device, s.device_index};
}

void DDP::zero_grad(StreamRef stream) {
  for (int b = 0; b < bucket_count(); ++b) zero_async(impl_->bucket_view(b), stream);
}

void DDP::grad_ready(int i, StreamRef stream) {
  Impl& s = *impl_;
  if (i < 0 || i >= static_cast<int>(s.params.size())) {
    throw Error(ErrorCategory::kInvalidArgument,
                "DDP::grad_ready: no parameter " + std::to_string(i));
  }
  if (s.ready[i]) {
    throw Error(ErrorCategory::kInvalidArgument, "DDP::grad_ready: parameter " + std::to_string(i) +
                                                     " marked ready twice in one step");
  }
  s.ready[i] = true;
  --s.pending[s.plan.slots[i].bucket];
  if (!s.no_sync) s.launch_ready(stream);
}

void DDP::finish(StreamRef stream) {
  trace::Scope scope("ddp finish", "ddp");
  Impl& s = *impl_;
  if (s.no_sync) {
    s.reset_step();
    return;
  }
  std::vector<int> missing;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    if (!s.ready[i]) missing.push_back(static_cast<int>(i));
  }
  if (!missing.empty() && !s.options.find_unused_parameters) {
    std::string names;
    for (std::size_t k = 0; k < missing.size() && k < 10; ++k)
      names += (k ? ", " : "") + std::to_string(missing[k]);
    if (missing.size() > 10) names += ", ...";
    s.reset_step();
    throw Error(ErrorCategory::kInvalidArgument,
                "DDP::finish: gradients of parameters " + names +
                    " never became ready this step; call grad_ready for every parameter, or set "
                    "find_unused_parameters to treat them as zero");
  }
  for (int i : missing) {
    zero_async(grad(i), stream);
    grad_ready(i, stream);
  }
  for (int b = 0; b < bucket_count(); ++b) s.complete_bucket(b, stream);
  s.reset_step();
}

void DDP::wait_grad(int i, StreamRef stream) {
  Impl& s = *impl_;
  if (i < 0 || i >= static_cast<int>(s.params.size())) {
    throw Error(ErrorCategory::kInvalidArgument,
                "DDP::wait_grad: no parameter " + std::to_string(i));
  }
  int b = s.plan.slots[i].bucket;
  if (s.no_sync) return;
  if (b >= s.next_launch) {
    throw Error(ErrorCategory::kInvalidArgument,
                "DDP::wait_grad: the bucket of parameter " + std::to_string(i) +
                    " has not started (a gradient in it, or in an earlier bucket, is not ready)");
  }
  s.complete_bucket(b, stream);
}

void DDP::set_no_sync(bool no_sync) { impl_->no_sync = no_sync; }

bool DDP::buckets_registered() const {
  return impl_->wire_registered.find('-') == std::string::npos;
}

std::string DDP::reduce_method() const { return impl_->reducer->method(); }

int DDP::bucket_count() const { return static_cast<int>(impl_->plan.bucket_counts.size()); }

std::size_t DDP::bucket_bytes(int bucket) const {
  return impl_->plan.bucket_counts.at(bucket) * dtype_size(impl_->options.grad_dtype);
}

}  // namespace rtd
