// GlooCommunicator: argument checks, mesh setup, and the queueing of each
// operation; the typed Gloo calls are in gloo_ops.cc.
#include "collectives/gloo/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <vector>

#include "collectives/cpu_work.h"
#include "collectives/gloo/gloo_ops.h"
#include "collectives/gloo/gloo_store_adapter.h"
#include "collectives/validate.h"
#include "runtime/core/log.h"

namespace rtd::gloo_backend {
namespace {

Error from_gloo(const std::string& what, const ::gloo::Exception& e) {
  std::string message = e.what();
  bool timed_out = message.find("Timed out") != std::string::npos ||
                   message.find("timed out") != std::string::npos;
  return Error(timed_out ? ErrorCategory::kTimeout : ErrorCategory::kBackend,
               what + " failed in Gloo: " + message +
                   (timed_out ? " (a peer may have failed or not called it)" : ""));
}

}  // namespace

GlooCommunicator::GlooCommunicator(const GlooOptions& options)
    : rank_(options.rank), size_(options.size), timeout_(options.timeout) {
  validate::rank_in_range("gloo init", "rank", rank_, size_);
  ::gloo::transport::tcp::attr attr;
  attr.hostname = options.host;
  try {
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(timeout_);
    GlooStoreAdapter store(options.store, timeout_);
    context->connectFullMesh(store, device);
    context_ = context;
  } catch (const ::gloo::Exception& e) {
    throw from_gloo("rank " + std::to_string(rank_) + " connecting the Gloo mesh on " +
                        options.host,
                    e);
  }
  log::get("gloo")->debug("mesh of {} ranks connected on {}", size_, options.host);
}

GlooCommunicator::~GlooCommunicator() = default;

template <typename Fn>
std::shared_ptr<Work> GlooCommunicator::enqueue(const char* op, std::uint32_t tag, Fn&& fn) {
  std::string what = std::string("gloo ") + op + " #" + std::to_string(tag) + " on rank " +
                     std::to_string(rank_);
  auto work = std::make_shared<CpuWork>(what, timeout_ + std::chrono::seconds(5));
  if (aborted_) {
    work->fail(Error(ErrorCategory::kBackend, what + ": communicator was aborted"));
    return work;
  }
  OpArgs args{.context = context_, .tag = tag, .timeout = timeout_};
  queue_.post([this, work, what, args, fn = std::forward<Fn>(fn)]() {
    if (aborted_) {
      work->fail(Error(ErrorCategory::kBackend, what + ": communicator was aborted"));
      return;
    }
    try {
      fn(args);
      work->complete();
    } catch (const ::gloo::Exception& e) {
      work->fail(from_gloo(what, e));
    } catch (const Error& e) {
      work->fail(e);
    } catch (const std::exception& e) {
      work->fail(Error(ErrorCategory::kInternal, what + ": " + e.what()));
    }
  });
  return work;
}

std::shared_ptr<Work> GlooCommunicator::all_reduce(BufferView in, BufferView out, ReduceOp op) {
  validate::host_buffer("all_reduce", in);
  validate::host_buffer("all_reduce", out);
  validate::same_dtype("all_reduce", in, out);
  validate::count_equals("all_reduce", "output", out.count, in.count);
  validate::reducible("all_reduce", in.dtype, op);
  return enqueue("all_reduce", next_tag(), [in, out, op](const OpArgs& args) {
    if (in.count > 0) run_all_reduce(args, in, out, op);
  });
}

std::shared_ptr<Work> GlooCommunicator::broadcast(BufferView buf, int root) {
  validate::host_buffer("broadcast", buf);
  validate::rank_in_range("broadcast", "root", root, size_);
  return enqueue("broadcast", next_tag(), [buf, root](const OpArgs& args) {
    if (buf.count > 0) run_broadcast(args, buf, root);
  });
}

std::shared_ptr<Work> GlooCommunicator::all_gather(BufferView in, BufferView out) {
  validate::host_buffer("all_gather", in);
  validate::host_buffer("all_gather", out);
  validate::same_dtype("all_gather", in, out);
  validate::count_equals("all_gather", "output", out.count, in.count * size_);
  const int rank = rank_;
  return enqueue("all_gather", next_tag(), [in, out, rank](const OpArgs& args) {
    if (in.count == 0) return;
    auto* slot = static_cast<char*>(out.data) + rank * in.bytes();
    if (slot != in.data) std::memmove(slot, in.data, in.bytes());
    run_all_gather(args, out, in.bytes());
  });
}

std::shared_ptr<Work> GlooCommunicator::reduce_scatter(BufferView in, BufferView out,
                                                       ReduceOp op) {
  validate::host_buffer("reduce_scatter", in);
  validate::host_buffer("reduce_scatter", out);
  validate::same_dtype("reduce_scatter", in, out);
  validate::count_equals("reduce_scatter", "input", in.count, out.count * size_);
  validate::reducible("reduce_scatter", in.dtype, op);
  const int rank = rank_;
  // Gloo's function API has no reduce-scatter: reduce the whole input into a
  // scratch copy (the input is left intact) and keep this rank's slice.
  return enqueue("reduce_scatter", next_tag(), [in, out, op, rank](const OpArgs& args) {
    if (out.count == 0) return;
    std::vector<char> scratch(in.bytes());
    BufferView whole = in;
    whole.data = scratch.data();
    run_all_reduce(args, in, whole, op);
    std::memmove(out.data, scratch.data() + rank * out.bytes(), out.bytes());
  });
}

std::shared_ptr<Work> GlooCommunicator::barrier() {
  return enqueue("barrier", next_tag(), [](const OpArgs& args) { run_barrier(args); });
}

std::shared_ptr<Work> GlooCommunicator::send(BufferView buf, int peer, int tag) {
  validate::host_buffer("send", buf);
  validate::rank_in_range("send", "peer", peer, size_);
  if (peer == rank_) throw Error(ErrorCategory::kInvalidArgument, "send: peer is this rank");
  if (tag < 0) throw Error(ErrorCategory::kInvalidArgument, "send: tag must be non-negative");
  return enqueue("send", static_cast<std::uint32_t>(tag), [buf, peer](const OpArgs& args) {
    if (buf.count > 0) run_send(args, buf, peer);
  });
}

std::shared_ptr<Work> GlooCommunicator::recv(BufferView buf, int peer, int tag) {
  validate::host_buffer("recv", buf);
  validate::rank_in_range("recv", "peer", peer, size_);
  if (peer == rank_) throw Error(ErrorCategory::kInvalidArgument, "recv: peer is this rank");
  if (tag < 0) throw Error(ErrorCategory::kInvalidArgument, "recv: tag must be non-negative");
  return enqueue("recv", static_cast<std::uint32_t>(tag), [buf, peer](const OpArgs& args) {
    if (buf.count > 0) run_recv(args, buf, peer);
  });
}

void GlooCommunicator::abort() {
  // Gloo cannot interrupt an operation in flight: it ends at its timeout; every
  // queued and later operation fails at once.
  aborted_ = true;
}

}  // namespace rtd::gloo_backend
