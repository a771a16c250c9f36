// HostOptimizer: the offloaded part of rtd::FSDP (FSDPOptions::offload,
// docs/offload.md). It holds in host memory the fp32 master
// shards, AdamW's moments, the reduced gradient shards and the parameter
// shards in the compute dtype; it copies each unit's reduced gradient in from
// the GPU as soon as its reduction is done, steps AdamW for the unit on the
// CPU on a thread of its own (the caller goes on queueing backward), and
// copies the unit's new parameters out to where the gathers read them.
//
// GPU engines copy on two streams of their own (gradients in: the caller's
// thread; parameters out: the worker's), ordered by events, never by
// blocking the caller, except finish(). On a CPU engine the "device" buffers
// are host memory and the copies are memcpy; the arithmetic is the same.
// Not thread-safe: one thread (the engine's) calls it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/device_memory.h"
#include "rt_dist/fsdp.h"
#include "rt_dist/types.h"
#include "sharding/host_worker.h"
#include "sharding/shard_ops.h"
#include "sharding/state_file.h"
#include "sharding/thread_team.h"

namespace rtd {

struct HostOptimizerShape {
  DeviceType device = DeviceType::kCpu;  // the engine's buffers'
  int device_index = 0;
  std::vector<std::size_t> shard_off, shard;  // per unit, in the shard space
  DType param_dtype = DType::kFloat32, reduce_dtype = DType::kFloat32;
  int threads = 1;  // the host AdamW's
  // Every unit's gradient held until step() (clipping, loss scaling, micro-
  // steps); false: each unit is stepped as its gradient arrives, so a few
  // slots hold the gradients in flight.
  bool every_gradient = true;
  // Every unit's compute-dtype shard kept on the host (kParameters); false:
  // a few slots hold the new parameters on their way to the GPU.
  bool keep_parameters = true;
  // Non-empty: the fp32 states in a file there (Offload::kNvme), a window of
  // kStateWindow units of them in host memory.
  std::string state_dir;
  int io_threads = 0;  // the file's; 0: kStateIoThreads
};

// kOptimizer or kNvme: the optimizer's states off the GPU, the compute-dtype
// parameter shards on it.
inline bool offloads_optimizer(Offload o) {
  return o == Offload::kOptimizer || o == Offload::kNvme;
}
// Units of the states in host memory with kNvme: the one stepped, one being
// written back, two read ahead.
constexpr int kStateWindow = 4;
// Threads moving the states file by default (8 MiB requests).
constexpr int kStateIoThreads = 8;

// Host slots for the gradients and parameters in flight when the shape does
// not keep them all (FSDP::plan counts them too).
inline int host_slots(std::size_t units) { return units < 3 ? static_cast<int>(units) : 3; }

class HostOptimizer {
 public:
  explicit HostOptimizer(HostOptimizerShape shape);
  ~HostOptimizer();  // waits for the host steps and the copies; their errors are dropped
  HostOptimizer(const HostOptimizer&) = delete;
  HostOptimizer& operator=(const HostOptimizer&) = delete;

  // Host memory this holds (pinned for a GPU engine: gradients, parameters),
  // and the bytes of the states' file (kNvme).
  std::size_t bytes() const { return bytes_; }
  std::size_t disk_bytes() const { return file_ ? file_->file_bytes() : 0; }
  // Unit u's fp32 array k: 0 the master shard, 1 and 2 AdamW's first and
  // second moments. Waits for the queued steps; with a states file, the
  // pointers hold until the next step is queued.
  float* state(int k, int u);
  // Unit u's shard in the compute dtype (keep_parameters only).
  BufferView params(int u) const;

  // Unit u's reduced gradient shard `reduced` (the engine's memory, reduce
  // dtype) once the work queued on stream so far is done: copied to the host,
  // or added to what the host holds for u (a later micro-step).
  void take_gradient(int u, const BufferView& reduced, bool accumulate, StreamRef stream);
  // The work queued on stream from now on waits until every gradient copied
  // so far has been read out of the engine's buffers (before they are reused).
  void gradients_read(StreamRef stream);
  // Unit u's AdamW step on the host, after its gradients have arrived; then
  // the new parameters (compute dtype) are copied to dest (the engine's
  // memory; data null: they stay in params(u)).
  void update_async(int u, const AdamWOptions& options, int step, float grad_scale,
                    const BufferView& dest);
  // Blocks until unit u's queued step has run (its params(u) are new).
  void wait_update(int u);
  // The ticket of the last step queued so far; finish_until(t, stream)
  // blocks until the steps up to ticket t have run and orders stream's work
  // from now on after their copies out (and any queued since).
  std::uint64_t last_ticket() const { return last_ticket_; }
  void finish_until(std::uint64_t ticket, StreamRef stream);
  // Blocks until every queued step has run (the host's states are final).
  void wait_steps() { worker_.wait_all(); }
  // Blocks until every queued step has run; the work queued on stream from
  // now on waits for their copies out. Rethrows a host step's error.
  void finish(StreamRef stream);
  // The sum of squares of every gradient on the host (every_gradient, after
  // finish()); waits for the copies in first.
  float gradient_sum_of_squares();
  // *dst = value (one float in the engine's memory), ordered before the work
  // queued on stream from now on.
  void put_float(float value, float* dst, StreamRef stream);
  // Seconds so far of the host's AdamW steps (on the worker), and of the
  // caller's waits for them in finish().
  double adamw_seconds() const { return adamw_ns_.load() * 1e-9; }
  double wait_seconds() const { return wait_ns_ * 1e-9; }
  // kNvme: seconds the host steps waited for their states from the disk.
  double read_wait_seconds() const { return file_ ? file_->read_wait_seconds() : 0.0; }
  // The parameters from the master shard (params(u) = cast of master(u)),
  // copied to dest as update_async does; blocks. After a load, at the start.
  void publish(int u, const BufferView& dest);

 private:
  BufferView host(const HostBuffer& buf, DType dtype, int u) const;
  // The worker's: unit u's states out of the file into a, its successors read ahead.
  void step_from_file(int u, shard::AdamWShard& a);
  BufferView slot(const HostBuffer& buf, DType dtype, int k, std::size_t count) const;
  BufferView gradient(int u) const;
  bool on_gpu() const { return s_.device == DeviceType::kCuda; }
  void copy_in(const BufferView& src, void* host_dst, StreamRef stream);

  HostOptimizerShape s_;
  std::size_t total_ = 0, largest_ = 0, bytes_ = 0;
  HostBuffer master_, m_, v_;  // empty with a states file
  std::unique_ptr<StateFile> file_;
  HostBuffer grads_, params_;                  // reduce dtype; compute dtype
  HostBuffer staging_[2];                      // a later micro-step's gradient, before it is added
  HostBuffer scalar_;                          // put_float's
  std::unique_ptr<gpu::CopyStream> in_, out_;  // GPU engines; out_: the worker's
  std::vector<std::uint64_t> update_ticket_;   // per unit: its last step's
  std::uint64_t last_ticket_ = 0;
  std::uint64_t staging_ticket_[2] = {0, 0};  // the last add out of each staging buffer
  int next_staging_ = 0;
  int slots_ = 0;                           // without every_gradient / keep_parameters
  std::vector<int> grad_slot_;              // per unit: its gradient's slot
  std::vector<std::uint64_t> grad_ticket_;  // per slot: the last step that read it
  int next_grad_ = 0;
  int next_out_ = 0;               // the worker's
  std::vector<bool> out_pending_;  // per slot: a copy out may still read it
  // The worker's, kNvme's read-ahead: per unit, the one stepped after it last
  // time (at first the next in backward's order, or step()'s).
  std::vector<int> next_;
  int last_stepped_ = -1;
  // The host AdamW's threads: the worker's, and gradient_sum_of_squares()'s
  // while the worker is idle.
  std::unique_ptr<shard::cpu::ThreadTeam> team_;
  std::atomic<long long> adamw_ns_{0};
  long long wait_ns_ = 0;
  HostWorker worker_;  // last: destroyed (joined) first
};

}  // namespace rtd
