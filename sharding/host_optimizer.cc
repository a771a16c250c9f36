#include "sharding/host_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "rt_dist/error.h"
#include "rt_dist/trace.h"
#include "sharding/cpu_adamw.h"
#include "sharding/shard_ops.h"

namespace rtd {
namespace {

std::size_t total_of(const HostOptimizerShape& s) {
  return s.shard.empty() ? 0 : s.shard_off.back() + s.shard.back();
}
long long nanoseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
}

std::size_t largest_of(const HostOptimizerShape& s) {
  return s.shard.empty() ? 0 : *std::max_element(s.shard.begin(), s.shard.end());
}

}  // namespace

// The fp32 states are touched by the CPU alone: ordinary memory. What the GPU
// copies to and from is pinned.
HostOptimizer::HostOptimizer(HostOptimizerShape shape)
    : s_(std::move(shape)),
      total_(total_of(s_)),
      largest_(largest_of(s_)),
      master_(s_.state_dir.empty() ? total_ * 4 : 0, false),
      m_(s_.state_dir.empty() ? total_ * 4 : 0, false),
      v_(s_.state_dir.empty() ? total_ * 4 : 0, false),
      grads_((s_.every_gradient ? total_ : host_slots(s_.shard.size()) * largest_) *
                 dtype_size(s_.reduce_dtype),
             on_gpu()),
      params_((s_.keep_parameters ? total_ : host_slots(s_.shard.size()) * largest_) *
                  dtype_size(s_.param_dtype),
              on_gpu()),
      // Only micro-steps after the first add through them.
      staging_{
          HostBuffer((s_.every_gradient ? largest_ : 0) * dtype_size(s_.reduce_dtype), on_gpu()),
          HostBuffer((s_.every_gradient ? largest_ : 0) * dtype_size(s_.reduce_dtype), on_gpu())},
      scalar_(4, on_gpu()),
      update_ticket_(s_.shard.size(), 0),
      slots_(host_slots(s_.shard.size())),
      grad_slot_(s_.shard.size(), 0),
      grad_ticket_(slots_, 0),
      out_pending_(slots_, false),
      next_(s_.shard.size(), 0),
      team_(std::make_unique<shard::cpu::ThreadTeam>(std::max(0, s_.threads - 1))) {
  const int n = static_cast<int>(s_.shard.size());
  for (int u = 0; u < n; ++u)  // backward's order (update_in_backward), else step()'s
    next_[u] = s_.every_gradient ? (u + 1) % n : (u + n - 1) % n;
  if (!s_.state_dir.empty()) {
    file_ = std::make_unique<StateFile>(s_.state_dir, s_.shard, kStateWindow,
                                        s_.io_threads > 0 ? s_.io_threads : kStateIoThreads);
    bytes_ += file_->window_bytes();
  }
  for (const HostBuffer* b : {&master_, &m_, &v_, &grads_, &params_, &staging_[0], &staging_[1]})
    bytes_ += b->bytes();
  if (on_gpu()) {
    // Events: one per unit, one per staging buffer, one per slot.
    const int events = static_cast<int>(s_.shard.size()) + 2 + slots_;
    in_ = std::make_unique<gpu::CopyStream>(s_.device_index, events);
    out_ = std::make_unique<gpu::CopyStream>(s_.device_index, events);
  }
}

HostOptimizer::~HostOptimizer() {
  try {
    worker_.wait_all();
    if (in_) in_->wait();
    if (out_) out_->wait();
  } catch (const std::exception&) {
  }
}

BufferView HostOptimizer::host(const HostBuffer& buf, DType dtype, int u) const {
  return BufferView{static_cast<char*>(buf.data()) + s_.shard_off[u] * dtype_size(dtype),
                    s_.shard[u], dtype, DeviceType::kCpu, 0};
}
float* HostOptimizer::state(int k, int u) {
  worker_.wait_all();
  if (file_) return file_->map(k, u);
  const HostBuffer* base[] = {&master_, &m_, &v_};
  return static_cast<float*>(base[k]->data()) + s_.shard_off[u];
}
BufferView HostOptimizer::params(int u) const {
  if (!s_.keep_parameters) throw Error(ErrorCategory::kInternal, "HostOptimizer: no parameters");
  return host(params_, s_.param_dtype, u);
}
BufferView HostOptimizer::slot(const HostBuffer& buf, DType dtype, int k, std::size_t count) const {
  return BufferView{static_cast<char*>(buf.data()) + k * largest_ * dtype_size(dtype), count, dtype,
                    DeviceType::kCpu, 0};
}
BufferView HostOptimizer::gradient(int u) const {
  if (s_.every_gradient) return host(grads_, s_.reduce_dtype, u);
  return slot(grads_, s_.reduce_dtype, grad_slot_[u], s_.shard[u]);
}

void HostOptimizer::copy_in(const BufferView& src, void* host_dst, StreamRef stream) {
  if (!on_gpu()) {
    std::memcpy(host_dst, src.data, src.bytes());
    return;
  }
  in_->after(stream);
  in_->to_host(src.data, host_dst, src.bytes());
}

void HostOptimizer::take_gradient(int u, const BufferView& reduced, bool accumulate,
                                  StreamRef stream) {
  trace::Scope scope("offload gradient to host", "fsdp");
  if (!s_.every_gradient) {
    if (accumulate)
      throw Error(ErrorCategory::kInternal, "HostOptimizer: a second micro-step, stepping early");
    // The next slot, once the step that last read it has run.
    const int k = next_grad_;
    next_grad_ = (next_grad_ + 1) % slots_;
    worker_.wait(grad_ticket_[k]);
    grad_slot_[u] = k;
  }
  const BufferView dst = gradient(u);
  if (!accumulate) {
    copy_in(reduced, dst.data, stream);
    if (on_gpu()) in_->record(u);
    return;
  }
  // A later micro-step: into a staging buffer whose last addition has run,
  // then added on the worker (after the copies before it, the first included).
  const int k = next_staging_;
  next_staging_ ^= 1;
  worker_.wait(staging_ticket_[k]);
  copy_in(reduced, staging_[k].data(), stream);
  const int event = static_cast<int>(s_.shard.size()) + k;
  if (on_gpu()) in_->record(event);
  const BufferView staged{staging_[k].data(), reduced.count, s_.reduce_dtype, DeviceType::kCpu, 0};
  staging_ticket_[k] = worker_.post([this, event, dst, staged] {
    if (on_gpu()) in_->sync(event);
    shard::add_into_async(dst, staged, {});
  });
}

void HostOptimizer::gradients_read(StreamRef stream) {
  if (on_gpu()) in_->before(stream);
}

void HostOptimizer::update_async(int u, const AdamWOptions& options, int step, float grad_scale,
                                 const BufferView& dest) {
  shard::AdamWShard a;
  a.param = BufferView{nullptr, s_.shard[u], DType::kFloat32, DeviceType::kCpu, 0};
  if (!file_) {
    a.param.data = static_cast<float*>(master_.data()) + s_.shard_off[u];
    a.m = static_cast<float*>(m_.data()) + s_.shard_off[u];
    a.v = static_cast<float*>(v_.data()) + s_.shard_off[u];
  }
  a.grad = gradient(u);
  if (s_.keep_parameters) a.out = params(u);
  a.options = options;
  a.step = step;
  a.grad_scale = grad_scale;
  update_ticket_[u] = worker_.post([this, u, a, dest]() mutable {
    if (on_gpu()) in_->sync(u);  // the first micro-step's copy in (later ones were added before)
    int out_slot = -1;
    if (!s_.keep_parameters) {  // the next out slot, once its last copy out has read it
      out_slot = next_out_;
      next_out_ = (next_out_ + 1) % slots_;
      const int event = static_cast<int>(s_.shard.size()) + 2 + out_slot;
      if (out_pending_[out_slot] && on_gpu()) out_->sync(event);
      out_pending_[out_slot] = false;
      a.out = slot(params_, s_.param_dtype, out_slot, s_.shard[u]);
    }
    if (file_) step_from_file(u, a);
    {
      trace::Scope scope("offload host AdamW", "fsdp");
      const auto start = std::chrono::steady_clock::now();
      shard::cpu::adamw(a, *team_);
      adamw_ns_ += nanoseconds_since(start);
    }
    if (file_) file_->release(u);
    if (!dest.data) return;
    if (!on_gpu()) {
      std::memcpy(dest.data, a.out.data, a.out.bytes());
      return;
    }
    out_->to_device(a.out.data, dest.data, a.out.bytes());
    if (out_slot >= 0) {
      out_->record(static_cast<int>(s_.shard.size()) + 2 + out_slot);
      out_pending_[out_slot] = true;
    }
  });
  if (!s_.every_gradient) grad_ticket_[grad_slot_[u]] = update_ticket_[u];
  last_ticket_ = update_ticket_[u];
}

void HostOptimizer::step_from_file(int u, shard::AdamWShard& a) {
  {
    trace::Scope scope("offload read states", "fsdp");
    const StateFile::Unit states = file_->acquire(u);
    a.param.data = states.master;
    a.m = states.m;
    a.v = states.v;
  }
  if (last_stepped_ >= 0) next_[last_stepped_] = u;
  last_stepped_ = u;
  // Read ahead what the window has room for, in the order the steps came last time.
  for (int k = 0, next = u; k < kStateWindow - 2; ++k) {
    next = next_[next];
    if (next == u) break;
    file_->prefetch(next);
  }
}

void HostOptimizer::finish_until(std::uint64_t ticket, StreamRef stream) {
  trace::Scope scope("offload wait for host steps", "fsdp");
  const auto start = std::chrono::steady_clock::now();
  worker_.wait(ticket);
  wait_ns_ += nanoseconds_since(start);
  // The worker may be queueing copies out meanwhile: before() orders stream
  // after those too, which costs only their time.
  if (on_gpu()) out_->before(stream);
}

void HostOptimizer::wait_update(int u) { worker_.wait(update_ticket_[u]); }

void HostOptimizer::finish(StreamRef stream) { finish_until(worker_.posted(), stream); }

float HostOptimizer::gradient_sum_of_squares() {
  // The first micro-step's gradients come in without a host task: finish()
  // did not wait for them.
  if (on_gpu()) in_->wait();
  // On the host AdamW's team (the worker is idle after finish()): one thread
  // reads 7 B bf16 gradients in about a second and a half. A sum per chunk,
  // added in the chunks' order, so the result does not depend on the threads.
  constexpr std::size_t kChunk = std::size_t(1) << 20;
  std::vector<float> sums((total_ + kChunk - 1) / kChunk, 0.0f);
  team_->run(total_, kChunk, [&](std::size_t first, std::size_t end) {
    const BufferView part{static_cast<char*>(grads_.data()) + first * dtype_size(s_.reduce_dtype),
                          end - first, s_.reduce_dtype, DeviceType::kCpu, 0};
    shard::sum_squares_async(part, &sums[first / kChunk], {});
  });
  double sum = 0.0;
  for (float x : sums) sum += x;
  return static_cast<float>(sum);
}

void HostOptimizer::put_float(float value, float* dst, StreamRef stream) {
  if (!on_gpu()) {
    *dst = value;
    return;
  }
  worker_.wait_all();  // out_ is the worker's while it steps
  out_->wait();        // the scalar's last copy has read it
  *static_cast<float*>(scalar_.data()) = value;
  out_->to_device(scalar_.data(), dst, 4);
  out_->before(stream);
}

void HostOptimizer::publish(int u, const BufferView& dest) {
  worker_.wait_all();
  BufferView cast = s_.keep_parameters ? params(u) : slot(params_, s_.param_dtype, 0, s_.shard[u]);
  if (!s_.keep_parameters && on_gpu()) out_->wait();  // no copy out still reads the slot
  const BufferView master{state(0, u), s_.shard[u], DType::kFloat32, DeviceType::kCpu, 0};
  cast_async(master, cast, {});
  if (!dest.data) return;
  if (on_gpu())
    gpu::copy_from_host(cast.data, dest.data, dest.bytes(), s_.device_index);
  else
    std::memcpy(dest.data, cast.data, dest.bytes());
}

}  // namespace rtd
