// rtd::DDP: data-parallel gradient reduction in buckets, overlapped with backward.
//
// The trainer registers its parameters once; DDP allocates the gradients as
// views into flat bucket buffers (grad(i)), so reducing them copies nothing.
// As backward produces each final gradient the trainer calls grad_ready(i);
// the moment a bucket is complete its all-reduce starts on the communicator's
// stream, ordered after the trainer's stream, while backward goes on.
// finish() makes the trainer's stream wait for every bucket (host buffers:
// blocks the host), after which grad(i) holds the average over ranks.
//
// Collective: every rank constructs the same DDP (same parameters, same
// order) and calls finish() each step. Not thread-safe: one thread drives it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rt_dist/communicator.h"
#include "rt_dist/context.h"
#include "rt_dist/store.h"
#include "rt_dist/types.h"

namespace rtd {

struct DDPOptions {
  double bucket_mb = 25.0;       // bucket cap after the first
  double first_bucket_mb = 1.0;  // the first bucket reduced (the last parameters) is small
  // Dtype of the gradient buckets (grad(i)): kFloat32, or kBFloat16 or
  // kFloat16 for a trainer whose products write 16-bit gradients and whose
  // optimizer reads them (half the memory and, with the same reduce_dtype,
  // half the bytes on the wire and no cast passes). float16 gradients
  // underflow unless the trainer scales its loss (and overflow shows as
  // inf: the trainer's loss scaler skips that step); DDP reduces what it is given.
  DType grad_dtype = DType::kFloat32;
  // Wire dtype of the reduction: kFloat32, kBFloat16 or kFloat16. Where it
  // differs from grad_dtype, gradients are cast, reduced, and cast back; sums
  // are formed in fp32 by NCCL, Gloo and the copy-engine addition.
  DType reduce_dtype = DType::kFloat32;
  // finish() treats gradients that never became ready as zero (PyTorch's
  // find_unused_parameters); otherwise it is an error naming them.
  bool find_unused_parameters = false;
  bool broadcast_parameters = true;  // rank 0's parameters win at construction
  // Buckets in memory the communicator registers for direct transfers
  // (Communicator::allocate_registered; NCCL: ncclMemAlloc + ncclCommRegister).
  // Where the backend has none, plain memory. Every rank must set it alike.
  bool register_buckets = false;
  // GPU ranks on one host with peer access: reduce the buckets with copy
  // engines (PersistentAllReduce), so that backward keeps every SM; elsewhere,
  // or when false, NCCL's all_reduce. Every rank must set it alike.
  bool copy_engines = true;
};

class DDP {
 public:
  // params: the model's parameters in registration order (all on one device,
  // one dtype: float32, bfloat16 or float16). Checks across ranks that every rank registered the
  // same count and shapes (a mismatch is rtd::Error(kInvalidArgument) on
  // every rank, within the store timeout), then broadcasts from rank 0.
  DDP(Communicator& comm, Store& store, std::vector<BufferView> params, DDPOptions options = {});
  DDP(Context& ctx, std::vector<BufferView> params, DDPOptions options = {})
      : DDP(ctx.comm(), ctx.store(), std::move(params), options) {}
  ~DDP();
  DDP(const DDP&) = delete;
  DDP& operator=(const DDP&) = delete;

  // Where parameter i's gradient lives (the parameter's count, grad_dtype).
  BufferView grad(int i) const;
  // Sets every gradient to zero, ordered on stream.
  void zero_grad(StreamRef stream = {});
  // Gradient i is final once the work queued on stream so far is done.
  void grad_ready(int i, StreamRef stream = {});
  // Every bucket reduced and averaged, stream ordered after it. Throws
  // rtd::Error(kInvalidArgument) naming gradients that never became ready
  // (unless find_unused_parameters).
  void finish(StreamRef stream = {});
  // Orders stream after the reduction of parameter i's bucket (which must have
  // started: every gradient of the bucket was ready), so that the optimizer can
  // update the parameters reduced first while the last buckets are still on
  // the wire. finish() is still called once per step.
  void wait_grad(int i, StreamRef stream = {});
  // While set, grad_ready only records and finish() reduces nothing:
  // gradients accumulate over micro-steps (scale the loss by 1/k).
  void set_no_sync(bool no_sync);

  int bucket_count() const;
  // Whether the buckets ended up in registered memory (register_buckets and a
  // backend that has it).
  bool buckets_registered() const;
  // How the buckets are reduced: "copy engines" or "all_reduce".
  std::string reduce_method() const;
  std::size_t bucket_bytes(int bucket) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rtd
