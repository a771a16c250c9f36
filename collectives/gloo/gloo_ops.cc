// Typed Gloo calls: reduction functions per dtype, avg as sum then scale, and
// bfloat16 and float16 through float32.
#include "collectives/gloo/gloo_ops.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/types.h>

#include <vector>

#include "collectives/half_floats.h"
#include "rt_dist/communicator.h"

namespace rtd::gloo_backend {
namespace {

constexpr std::uint8_t kP2PSlotPrefix = 0x20;

template <typename T>
::gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case ReduceOp::kMin:
      return static_cast<Fn>(&::gloo::min<T>);
    case ReduceOp::kMax:
      return static_cast<Fn>(&::gloo::max<T>);
    default:
      return static_cast<Fn>(&::gloo::sum<T>);  // avg is sum, then scaled
  }
}

template <typename T>
void typed_all_reduce(const OpArgs& args, const T* in, T* out, std::size_t count, ReduceOp op) {
  ::gloo::AllreduceOptions opts(args.context);
  if (in != out) opts.setInput(const_cast<T*>(in), count);
  opts.setOutput(out, count);
  opts.setReduceFunction(reduce_fn<T>(op));
  opts.setTag(args.tag);
  opts.setTimeout(args.timeout);
  ::gloo::allreduce(opts);
  if (op == ReduceOp::kAvg) {
    const T scale = static_cast<T>(args.context->size);
    for (std::size_t i = 0; i < count; ++i) out[i] /= scale;
  }
}

// bfloat16 or float16: reduced in float32, rounded once at the end.
void half_all_reduce(const OpArgs& args, const BufferView& in, const BufferView& out, ReduceOp op) {
  std::vector<float> wide = widen(in);
  typed_all_reduce<float>(args, wide.data(), wide.data(), wide.size(), op);
  narrow(wide, out);
}

}  // namespace

void run_all_reduce(const OpArgs& args, const BufferView& in, const BufferView& out, ReduceOp op) {
  switch (in.dtype) {
    case DType::kFloat32:
      return typed_all_reduce(args, static_cast<const float*>(in.data),
                              static_cast<float*>(out.data), in.count, op);
    case DType::kFloat64:
      return typed_all_reduce(args, static_cast<const double*>(in.data),
                              static_cast<double*>(out.data), in.count, op);
    case DType::kInt32:
      return typed_all_reduce(args, static_cast<const std::int32_t*>(in.data),
                              static_cast<std::int32_t*>(out.data), in.count, op);
    case DType::kInt64:
      return typed_all_reduce(args, static_cast<const std::int64_t*>(in.data),
                              static_cast<std::int64_t*>(out.data), in.count, op);
    case DType::kBFloat16:
      return half_all_reduce(args, in, out, op);
    case DType::kFloat16:
      return half_all_reduce(args, in, out, op);
  }
}

void run_broadcast(const OpArgs& args, const BufferView& buf, int root) {
  ::gloo::BroadcastOptions opts(args.context);
  opts.setOutput(static_cast<std::uint8_t*>(buf.data), buf.bytes());
  opts.setRoot(root);
  opts.setTag(args.tag);
  opts.setTimeout(args.timeout);
  ::gloo::broadcast(opts);
}

void run_all_gather(const OpArgs& args, const BufferView& out, std::size_t bytes_per_rank) {
  ::gloo::AllgatherOptions opts(args.context);
  opts.setOutput(static_cast<std::uint8_t*>(out.data), out.bytes());
  opts.setTag(args.tag);
  opts.setTimeout(args.timeout);
  ::gloo::allgather(opts);
}

void run_barrier(const OpArgs& args) {
  ::gloo::BarrierOptions opts(args.context);
  opts.setTag(args.tag);
  opts.setTimeout(args.timeout);
  ::gloo::barrier(opts);
}

void run_all_to_all(const OpArgs& args, const BufferView& in, const BufferView& out) {
  ::gloo::AlltoallOptions opts(args.context);
  opts.setInput(static_cast<std::uint8_t*>(in.data), in.bytes());
  opts.setOutput(static_cast<std::uint8_t*>(out.data), out.bytes());
  opts.setTag(args.tag);
  opts.setTimeout(args.timeout);
  ::gloo::alltoall(opts);
}

std::unique_ptr<::gloo::transport::UnboundBuffer> post_point_to_point(const OpArgs& args,
                                                                      const P2POp& op) {
  auto ub = args.context->createUnboundBuffer(op.buf.data, op.buf.bytes());
  auto slot = ::gloo::Slot::build(kP2PSlotPrefix, op.tag);
  if (op.is_send) {
    ub->send(op.peer, slot);
  } else if (op.peer == Communicator::kAnySource) {
    std::vector<int> others;
    for (int r = 0; r < args.context->size; ++r) {
      if (r != args.context->rank) others.push_back(r);
    }
    ub->recv(others, slot);
  } else {
    ub->recv(op.peer, slot);
  }
  return ub;
}

int wait_point_to_point(::gloo::transport::UnboundBuffer& buf, const P2POp& op,
                        std::chrono::milliseconds timeout) {
  int rank = op.peer;
  const bool ended = op.is_send ? buf.waitSend(&rank, timeout) : buf.waitRecv(&rank, timeout);
  if (!ended) {  // woken by the communicator's abort
    throw Error(ErrorCategory::kBackend,
                std::string(op.is_send ? "send" : "receive") + ": the communicator was aborted");
  }
  return rank;
}

void run_point_to_point(const OpArgs& args, const std::vector<P2POp>& ops) {
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> bufs;
  for (const auto& op : ops) bufs.push_back(post_point_to_point(args, op));
  for (std::size_t i = 0; i < ops.size(); ++i) wait_point_to_point(*bufs[i], ops[i], args.timeout);
}

}  // namespace rtd::gloo_backend
