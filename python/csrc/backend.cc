#include "backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

#include "device_streams.h"
#include "errors.h"
#include "tensor_bytes.h"

namespace rtd_torch {
namespace {

using c10d::OpType;
using c10d::ReduceOp;

// RTD_TORCH_COPY_ENGINES (default 0): NCCL's all-reduces of sums and
// averages within one host by copy engines (docs/torch.md).
bool copy_engines_from_env() {
  const char* v = std::getenv("RTD_TORCH_COPY_ENGINES");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) {
    return false;
  }
  if (std::strcmp(v, "1") == 0) {
    return true;
  }
  C10_THROW_ERROR(ValueError, std::string("RTD_TORCH_COPY_ENGINES='") + v + "': use 0 or 1");
}

// RTD_TORCH_STREAM_PRIORITY: "high" (the default, as measured in
// docs/torch.md) or "default" (ProcessGroupNCCL's priority): the NCCL
// communicator's stream.
bool high_priority_from_env() {
  const char* v = std::getenv("RTD_TORCH_STREAM_PRIORITY");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "high") == 0) {
    return true;
  }
  if (std::strcmp(v, "default") == 0) {
    return false;
  }
  C10_THROW_ERROR(ValueError,
                  std::string("RTD_TORCH_STREAM_PRIORITY='") + v + "': use default or high");
}

// librt_dist's code of a reduction it runs itself; -1 for the others.
int reduce_op_code(const ReduceOp& op) {
  switch (op.op_) {
    case ReduceOp::SUM:
      return RTD_SUM;
    case ReduceOp::AVG:
      return RTD_AVG;
    case ReduceOp::MIN:
      return RTD_MIN;
    case ReduceOp::MAX:
      return RTD_MAX;
    default:
      return -1;
  }
}

bool reduced_by_gathering(const ReduceOp& op) {
  return op.op_ == ReduceOp::PRODUCT || op.op_ == ReduceOp::BAND || op.op_ == ReduceOp::BOR ||
         op.op_ == ReduceOp::BXOR;
}

// Integer (and bool) dtypes librt_dist does not reduce: reduced in int32.
bool widened(at::ScalarType type) {
  return type == at::kBool || type == at::kByte || type == at::kChar || type == at::kShort ||
         type == at::kUInt16;
}

void* ptr(const at::Tensor& t) { return t.data_ptr(); }

// The C API's device argument: the GPU, or -1 for host memory.
int gpu_index(const at::Device& device) { return device.is_cuda() ? device.index() : -1; }

at::Tensor contiguous_or_staged(const at::Tensor& t, Finish& finish) {
  if (t.is_contiguous()) {
    return t;
  }
  at::Tensor c = t.contiguous();
  then(finish.after, [t, c]() mutable { t.copy_(c); });
  return c;
}

}  // namespace

BackendRTD::BackendRTD(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                       std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      store_(std::move(store)),
      timeout_(timeout.count() > 0 ? timeout : std::chrono::milliseconds(1800000)),
      copy_engines_(copy_engines_from_env()) {}

BackendRTD::~BackendRTD() { shutdown(); }

void BackendRTD::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = timeout;  // for the communicators made from now on
}

void BackendRTD::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* comm : {&cpu_, &cuda_}) {
    if (*comm) {
      (*comm)->abort();
    }
  }
}

void BackendRTD::shutdown() {
  std::shared_ptr<Comm> cpu, cuda;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cpu = std::move(cpu_);
    cuda = std::move(cuda_);
  }
  // Freed here unless a Work still holds one.
}

std::string BackendRTD::where(const char* what) const {
  return std::string("rtd ") + what + " on rank " + std::to_string(getRank()) + " of " +
         std::to_string(getSize());
}

at::Device BackendRTD::device_of(const std::vector<at::Tensor>& tensors, const char* what) const {
  TORCH_CHECK_VALUE(!tensors.empty(), where(what), ": no tensors");
  const at::Device device = tensors[0].device();
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK_VALUE(t.device() == device, where(what), ": tensors on ", device, " and ",
                      t.device(), "; every tensor must be on one device");
  }
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda(), where(what), ": tensors on ", device,
                    " are not supported (cpu, cuda)");
  return device;
}

std::shared_ptr<Comm> BackendRTD::comm_for(const at::Device& device, const char* what) {
  std::shared_ptr<Comm>& comm = device.is_cuda() ? cuda_ : cpu_;
  if (!comm) {
    CommOptions o;
    o.cuda = device.is_cuda();
    o.device = o.cuda ? device.index() : -1;
    o.rank = getRank();
    o.size = getSize();
    o.timeout = timeout_;
    o.copy_engines = copy_engines_;
    o.high_priority_stream = high_priority_from_env();
    o.name = "rtd group of " + std::to_string(getSize()) + (o.cuda ? " cuda" : " cpu");
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        std::string("rtd/") + (o.cuda ? "cuda/" : "cpu/"), store_);
    comm = std::make_shared<Comm>(prefixed, std::move(o));
  } else if (comm->cuda() && device.index() != comm->device()) {
    C10_THROW_ERROR(ValueError, where(what) +
                                    ": this group runs on cuda:" + std::to_string(comm->device()) +
                                    ", a tensor is on " + device.str() + "; one GPU per rank");
  }
  return comm;
}

c10::intrusive_ptr<c10d::Work> BackendRTD::launch(const at::Device& device, OpType type,
                                                  const char* what, Finish finish,
                                                  const Call& call) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> comm = comm_for(device, what);
  comm->check(where(what));
  comm->reap();
  void* stream = comm->cuda() ? current_stream(comm->device()).native_handle() : nullptr;
  rtd_work* handle = call ? call(comm->handle(), stream) : nullptr;  // none: nothing to move
  if (call && handle == nullptr) {
    raise_last_error(where(what));
  }
  ++calls_;
  return c10::make_intrusive<WorkRTD>(std::move(comm), handle, type, where(what),
                                      std::move(finish));
}

// -- all-reduce and reduce -------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BackendRTD::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  if (tensors.size() != 1) {
    c10d::AllreduceCoalescedOptions o;
    o.reduceOp = opts.reduceOp;
    o.timeout = opts.timeout;
    return allreduce_coalesced(tensors, o);
  }
  return all_reduce_into(tensors[0], opts.reduceOp, {tensors[0]}, nullptr, "all_reduce");
}

c10::intrusive_ptr<c10d::Work> BackendRTD::all_reduce_into(const at::Tensor& t, const ReduceOp& op,
                                                           std::vector<at::Tensor> outputs,
                                                           std::function<void()> last,
                                                           const char* what) {
  const at::Device device = device_of({t}, what);
  Finish finish;
  finish.outputs = std::move(outputs);
  if (reduced_by_gathering(op)) {
    return reduce_by_gathering(t, op, std::move(finish), std::move(last), what);
  }
  const int code = reduce_op_code(op);
  TORCH_CHECK_VALUE(code >= 0, where(what), ": the reduction ", op.op_,
                    " is not supported (SUM, AVG, MIN, MAX, PRODUCT, BAND, BOR, BXOR)");
  at::Tensor c = contiguous_or_staged(t, finish);
  at::Tensor w = c;
  if (c.is_complex()) {
    TORCH_CHECK_VALUE(code == RTD_SUM || code == RTD_AVG, where(what),
                      ": complex tensors reduce by SUM or AVG only");
    w = at::view_as_real(c).reshape({-1});
  } else if (widened(c.scalar_type())) {
    w = c.to(at::kInt);
    // Before the copy back of a non-contiguous t (the chain runs in order).
    std::function<void()> copy_back = std::move(finish.after);
    finish.after = [c, w]() mutable { c.copy_(w); };
    if (copy_back) {
      then(finish.after, std::move(copy_back));
    }
  }
  const int dtype = reduce_code(w.scalar_type());
  TORCH_CHECK_TYPE(dtype >= 0, where(what), ": dtype ", t.scalar_type(),
                   " cannot be reduced (floating, integer, bool and complex types can)");
  if (last) {
    then(finish.after, std::move(last));
  }
  finish.keep = {t, c, w};
  void* p = ptr(w);
  const int64_t n = w.numel();
  return launch(device, OpType::ALLREDUCE, what, std::move(finish),
                [=](rtd_comm* comm, void* stream) {
                  return rtd_all_reduce(comm, p, p, n, dtype, code, gpu_index(device), stream);
                });
}

c10::intrusive_ptr<c10d::Work> BackendRTD::reduce_by_gathering(const at::Tensor& t,
                                                               const ReduceOp& op, Finish finish,
                                                               std::function<void()> last,
                                                               const char* what) {
  at::Tensor c = t.contiguous();
  at::Tensor rows = at::empty({getSize(), c.numel()}, c.options());
  Call call = all_gather_call(c, rows, finish);
  then(finish.after, [t, rows, kind = op.op_]() mutable {
    at::Tensor r = rows[0].clone();
    for (int64_t i = 1; i < rows.size(0); ++i) {
      switch (kind) {
        case ReduceOp::PRODUCT:
          r.mul_(rows[i]);
          break;
        case ReduceOp::BAND:
          r.bitwise_and_(rows[i]);
          break;
        case ReduceOp::BOR:
          r.bitwise_or_(rows[i]);
          break;
        default:
          r.bitwise_xor_(rows[i]);
          break;
      }
    }
    t.copy_(r.view(t.sizes()));
  });
  if (last) {
    then(finish.after, std::move(last));
  }
  finish.keep.insert(finish.keep.end(), {t, c, rows});
  return launch(device_of({t}, what), OpType::ALLREDUCE, what, std::move(finish), call);
}

c10::intrusive_ptr<c10d::Work> BackendRTD::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* what = "all_reduce_coalesced";
  device_of(tensors, what);
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK_TYPE(t.scalar_type() == tensors[0].scalar_type(), where(what),
                     ": every tensor must have one dtype");
  }
  // One flat tensor reduced once, then copied back.
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors) {
    parts.push_back(t.reshape({-1}));
  }
  at::Tensor flat = at::cat(parts);
  auto copy_back = [tensors, flat]() mutable {
    int64_t at_ = 0;
    for (at::Tensor& t : tensors) {
      t.copy_(flat.narrow(0, at_, t.numel()).view(t.sizes()));
      at_ += t.numel();
    }
  };
  return all_reduce_into(flat, opts.reduceOp, tensors, copy_back, what);
}

c10::intrusive_ptr<c10d::Work> BackendRTD::reduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOptions& opts) {
  const char* what = "reduce";
  TORCH_CHECK_VALUE(tensors.size() == 1, where(what), ": one tensor per call");
  at::Tensor t = tensors[0];
  // An all-reduce whose result only the root keeps: the others reduce a copy.
  at::Tensor target = getRank() == opts.rootRank ? t : t.clone();
  return all_reduce_into(target, opts.reduceOp, {t}, nullptr, what);
}

// -- moves --------------------------------------------------------------------

BackendRTD::Call BackendRTD::all_gather_call(const at::Tensor& in, const at::Tensor& out,
                                             Finish& finish) {
  const at::Device device = in.device();
  if (auto u = as_units(in)) {
    auto o = as_units(out, getSize());
    if (o && o->dtype == u->dtype) {
      void* pi = ptr(u->view);
      void* po = ptr(o->view);
      const int64_t n = u->view.numel();
      const int dtype = u->dtype;
      finish.keep.insert(finish.keep.end(), {u->view, o->view});
      return [=](rtd_comm* comm, void* stream) {
        return rtd_all_gather(comm, pi, po, n, dtype, gpu_index(device), stream);
      };
    }
  }
  // An odd byte count: each rank's bytes padded by one.
  const int64_t b = in.numel() * static_cast<int64_t>(in.element_size());
  const int64_t padded = b + 1;
  at::Tensor pin = at::zeros({padded}, in.options().dtype(at::kByte));
  pin.narrow(0, 0, b).copy_(bytes_of(in));
  at::Tensor pout = at::empty({getSize() * padded}, pin.options());
  at::Tensor out_bytes = bytes_of(out);
  const int size = getSize();
  then(finish.after, [=]() mutable {
    out_bytes.view({size, b}).copy_(pout.view({size, padded}).narrow(1, 0, b));
  });
  finish.keep.insert(finish.keep.end(), {pin, pout, out});
  void* pi = ptr(pin);
  void* po = ptr(pout);
  return [=](rtd_comm* comm, void* stream) {
    return rtd_all_gather(comm, pi, po, padded / 2, RTD_FLOAT16, gpu_index(device), stream);
  };
}

c10::intrusive_ptr<c10d::Work> BackendRTD::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  const char* what = "broadcast";
  TORCH_CHECK_VALUE(tensors.size() == 1, where(what), ": one tensor per call");
  const at::Device device = device_of(tensors, what);
  const int root = static_cast<int>(opts.rootRank);
  Finish finish;
  finish.outputs = tensors;
  at::Tensor c = tensors[0].is_contiguous() ? tensors[0] : tensors[0].contiguous();
  if (!tensors[0].is_contiguous()) {
    then(finish.after, [t = tensors[0], c]() mutable { t.copy_(c); });
  }
  at::Tensor buf;
  int dtype;
  if (auto u = as_units(c)) {
    buf = u->view;
    dtype = u->dtype;
  } else {
    const int64_t b = c.numel() * static_cast<int64_t>(c.element_size());
    buf = at::zeros({b + 1}, c.options().dtype(at::kByte));
    buf.narrow(0, 0, b).copy_(bytes_of(c));
    std::function<void()> copy_back = std::move(finish.after);
    finish.after = [c, buf, b]() mutable { bytes_of(c).copy_(buf.narrow(0, 0, b)); };
    if (copy_back) {
      then(finish.after, std::move(copy_back));
    }
    buf = buf.view(at::kHalf);
    dtype = RTD_FLOAT16;
  }
  finish.keep = {tensors[0], c, buf};
  void* p = ptr(buf);
  const int64_t n = buf.numel();
  return launch(device, OpType::BROADCAST, what, std::move(finish),
                [=](rtd_comm* comm, void* stream) {
                  return rtd_broadcast(comm, p, n, dtype, root, gpu_index(device), stream);
                });
}

c10::intrusive_ptr<c10d::Work> BackendRTD::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions&) {
  const char* what = "all_gather_into_tensor";
  const at::Device device = device_of({output, input}, what);
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), where(what), ": output has ",
                    output.numel(), " elements, not ", getSize(), " x ", input.numel());
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), where(what),
                   ": input and output dtypes differ");
  Finish finish;
  finish.outputs = {output};
  at::Tensor in = input.contiguous();
  at::Tensor out = contiguous_or_staged(output, finish);
  std::function<void()> copy_back = std::move(finish.after);
  finish.after = nullptr;
  Call call = all_gather_call(in, out, finish);
  if (copy_back) {
    then(finish.after, std::move(copy_back));
  }
  finish.keep.insert(finish.keep.end(), {output, input, in, out});
  return launch(device, OpType::_ALLGATHER_BASE, what, std::move(finish), call);
}

c10::intrusive_ptr<c10d::Work> BackendRTD::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions&) {
  const char* what = "all_gather";
  TORCH_CHECK_VALUE(inputs.size() == 1 && outputs.size() == 1, where(what),
                    ": one input tensor per call");
  const at::Tensor& t = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(outs.size()) == getSize(), where(what), ": ", getSize(),
                    " outputs are needed, not ", outs.size());
  std::vector<at::Tensor> all = outs;
  all.push_back(t);
  const at::Device device = device_of(all, what);
  bool even = true;
  for (const at::Tensor& o : outs) {
    TORCH_CHECK_TYPE(o.scalar_type() == t.scalar_type(), where(what),
                     ": input and output dtypes differ");
    even = even && o.numel() == t.numel();
  }
  if (!even) {  // sizes that differ by rank: sends and receives
    Exchange x;
    for (int r = 0; r < getSize(); ++r) {
      if (r == getRank()) {
        outs[r].copy_(t.view(outs[r].sizes()));
        continue;
      }
      add_send(x, t, r);
      add_recv(x, outs[r], r);
    }
    x.finish.outputs = outs;
    return run_exchange(device, OpType::ALLGATHER, what, std::move(x));
  }
  Finish finish;
  finish.outputs = outs;
  at::Tensor in = t.contiguous();
  at::Tensor flat = at::empty({getSize() * t.numel()}, t.options());
  Call call = all_gather_call(in, flat, finish);
  then(finish.after, [outs, flat, n = t.numel()]() mutable {
    for (size_t r = 0; r < outs.size(); ++r) {
      outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r].sizes()));
    }
  });
  finish.keep.insert(finish.keep.end(), {t, in, flat});
  return launch(device, OpType::ALLGATHER, what, std::move(finish), call);
}

c10::intrusive_ptr<c10d::Work> BackendRTD::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const char* what = "all_gather_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), where(what), ": ", inputs.size(),
                    " inputs and ", outputs.size(), " output lists");
  const at::Device device = device_of(inputs, what);
  // Every input's bytes end to end, gathered once, then cut per rank and tensor.
  std::vector<at::Tensor> parts;
  std::vector<int64_t> sizes;
  for (const at::Tensor& t : inputs) {
    parts.push_back(bytes_of(t.contiguous()));
    sizes.push_back(parts.back().numel());
  }
  at::Tensor in = at::cat(parts);
  const int64_t total = in.numel();
  at::Tensor gathered = at::empty({getSize() * total}, in.options());
  Finish finish;
  for (auto& list : outputs) {
    TORCH_CHECK_VALUE(static_cast<int>(list.size()) == getSize(), where(what),
                      ": each output list needs ", getSize(), " tensors");
    finish.outputs.insert(finish.outputs.end(), list.begin(), list.end());
  }
  Call call = all_gather_call(in, gathered, finish);
  then(finish.after, [outputs, gathered, sizes, total]() mutable {
    int64_t offset = 0;
    for (size_t k = 0; k < outputs.size(); ++k) {
      for (size_t r = 0; r < outputs[k].size(); ++r) {
        at::Tensor& o = outputs[k][r];
        at::Tensor piece = gathered.narrow(0, static_cast<int64_t>(r) * total + offset, sizes[k]);
        TORCH_CHECK_VALUE(o.numel() * static_cast<int64_t>(o.element_size()) == sizes[k],
                          "rtd all_gather_coalesced: an output's size differs from its input's");
        o.copy_(piece.view(o.scalar_type()).view(o.sizes()));
      }
      offset += sizes[k];
    }
  });
  finish.keep.insert(finish.keep.end(), {in, gathered});
  return launch(device, OpType::ALLGATHER_COALESCED, what, std::move(finish), call);
}

c10::intrusive_ptr<c10d::Work> BackendRTD::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const char* what = "all_gather_into_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size() && !inputs.empty(), where(what), ": ",
                    inputs.size(), " inputs and ", outputs.size(), " outputs");
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  const at::Device device = device_of(all, what);
  Finish finish;
  finish.outputs = outputs;
  std::vector<rtd_op> ops;
  for (size_t k = 0; k < inputs.size(); ++k) {
    TORCH_CHECK_VALUE(outputs[k].numel() == inputs[k].numel() * getSize(), where(what), ": output ",
                      k, " is not ", getSize(), " x its input");
    at::Tensor in = inputs[k].contiguous();
    at::Tensor out = contiguous_or_staged(outputs[k], finish);
    auto u = as_units(in);
    auto o = as_units(out, getSize());
    TORCH_CHECK_VALUE(u && o && u->dtype == o->dtype, where(what),
                      ": a tensor of an odd byte count; gather it on its own");
    ops.push_back(
        rtd_op{RTD_OP_ALL_GATHER, ptr(u->view), ptr(o->view), u->view.numel(), u->dtype, 0, 0});
    finish.keep.insert(finish.keep.end(), {inputs[k], outputs[k], u->view, o->view});
  }
  return launch(device, OpType::COALESCED, what, std::move(finish),
                [ops = std::move(ops), device](rtd_comm* comm, void* stream) {
                  return rtd_group(comm, ops.data(), static_cast<int>(ops.size()),
                                   gpu_index(device), stream);
                });
}

// -- reduce-scatter ---------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BackendRTD::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor";
  const at::Device device = device_of({output, input}, what);
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), where(what), ": input has ",
                    input.numel(), " elements, not ", getSize(), " x ", output.numel());
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), where(what),
                   ": input and output dtypes differ");
  const int code = reduce_op_code(opts.reduceOp);
  TORCH_CHECK_VALUE(code >= 0, where(what), ": the reduction ", opts.reduceOp.op_,
                    " is not supported (SUM, AVG, MIN, MAX)");
  Finish finish;
  finish.outputs = {output};
  at::Tensor in = input.contiguous();
  at::Tensor out = contiguous_or_staged(output, finish);
  at::Tensor wi = in;
  at::Tensor wo = out;
  if (in.is_complex()) {
    TORCH_CHECK_VALUE(code == RTD_SUM || code == RTD_AVG, where(what),
                      ": complex tensors reduce by SUM or AVG only");
    wi = at::view_as_real(in).reshape({-1});
    wo = at::view_as_real(out).reshape({-1});
  } else if (widened(in.scalar_type())) {
    wi = in.to(at::kInt);
    wo = at::empty(out.sizes(), out.options().dtype(at::kInt));
    std::function<void()> copy_back = std::move(finish.after);
    finish.after = [out, wo]() mutable { out.copy_(wo); };
    if (copy_back) {
      then(finish.after, std::move(copy_back));
    }
  }
  const int dtype = reduce_code(wi.scalar_type());
  TORCH_CHECK_TYPE(dtype >= 0, where(what), ": dtype ", input.scalar_type(),
                   " cannot be reduced (floating, integer, bool and complex types can)");
  finish.keep = {output, input, in, out, wi, wo};
  void* pi = ptr(wi);
  void* po = ptr(wo);
  const int64_t n = wo.numel();
  return launch(device, OpType::_REDUCE_SCATTER_BASE, what, std::move(finish),
                [=](rtd_comm* comm, void* stream) {
                  return rtd_reduce_scatter(comm, pi, po, n, dtype, code, gpu_index(device),
                                            stream);
                });
}

c10::intrusive_ptr<c10d::Work> BackendRTD::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == 1 && inputs.size() == 1, where("reduce_scatter"),
                    ": one output tensor per call");
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : inputs[0]) {
    TORCH_CHECK_VALUE(t.numel() == outputs[0].numel(), where("reduce_scatter"),
                      ": every input must have the output's size");
    parts.push_back(t.reshape({-1}));
  }
  at::Tensor flat = at::cat(parts);
  at::Tensor out = outputs[0];
  return _reduce_scatter_base(out, flat, opts);
}

c10::intrusive_ptr<c10d::Work> BackendRTD::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size() && !inputs.empty(), where(what), ": ",
                    inputs.size(), " inputs and ", outputs.size(), " outputs");
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  const at::Device device = device_of(all, what);
  const int code = reduce_op_code(opts.reduceOp);
  TORCH_CHECK_VALUE(code >= 0, where(what), ": the reduction ", opts.reduceOp.op_,
                    " is not supported (SUM, AVG, MIN, MAX)");
  Finish finish;
  finish.outputs = outputs;
  std::vector<rtd_op> ops;
  for (size_t k = 0; k < inputs.size(); ++k) {
    TORCH_CHECK_VALUE(inputs[k].numel() == outputs[k].numel() * getSize(), where(what), ": input ",
                      k, " is not ", getSize(), " x its output");
    const int dtype = reduce_code(inputs[k].scalar_type());
    TORCH_CHECK_TYPE(dtype >= 0 && outputs[k].scalar_type() == inputs[k].scalar_type(), where(what),
                     ": dtype ", inputs[k].scalar_type(),
                     " is reduced one tensor at a time (reduce_scatter_tensor)");
    at::Tensor in = inputs[k].contiguous();
    at::Tensor out = contiguous_or_staged(outputs[k], finish);
    ops.push_back(rtd_op{RTD_OP_REDUCE_SCATTER, ptr(in), ptr(out), out.numel(), dtype, code, 0});
    finish.keep.insert(finish.keep.end(), {inputs[k], outputs[k], in, out});
  }
  return launch(device, OpType::COALESCED, what, std::move(finish),
                [ops = std::move(ops), device](rtd_comm* comm, void* stream) {
                  return rtd_group(comm, ops.data(), static_cast<int>(ops.size()),
                                   gpu_index(device), stream);
                });
}

// -- sends and receives ---------------------------------------------------------

void BackendRTD::add_send(Exchange& x, const at::Tensor& t, int peer) {
  at::Tensor c = t.contiguous();
  if (c.numel() == 0) {
    return;
  }
  at::Tensor buf;
  int dtype;
  if (auto u = as_units(c)) {
    buf = u->view;
    dtype = u->dtype;
  } else {  // odd bytes: padded by one
    const int64_t b = c.numel() * static_cast<int64_t>(c.element_size());
    at::Tensor padded = at::zeros({b + 1}, c.options().dtype(at::kByte));
    padded.narrow(0, 0, b).copy_(bytes_of(c));
    buf = padded.view(at::kHalf);
    dtype = RTD_FLOAT16;
  }
  x.ops.push_back(rtd_op{RTD_OP_SEND, ptr(buf), nullptr, buf.numel(), dtype, 0, peer});
  x.finish.keep.insert(x.finish.keep.end(), {t, c, buf});
}

void BackendRTD::add_recv(Exchange& x, const at::Tensor& t, int peer) {
  if (t.numel() == 0) {
    return;
  }
  if (t.is_contiguous()) {
    if (auto u = as_units(t)) {
      x.ops.push_back(
          rtd_op{RTD_OP_RECV, nullptr, ptr(u->view), u->view.numel(), u->dtype, 0, peer});
      x.finish.keep.insert(x.finish.keep.end(), {t, u->view});
      return;
    }
  }
  // Into a buffer of an even byte count, then copied out.
  const int64_t b = t.numel() * static_cast<int64_t>(t.element_size());
  at::Tensor buf = at::empty({b + b % 2}, t.options().dtype(at::kByte));
  then(x.finish.after, [t, buf, b]() mutable {
    t.copy_(buf.narrow(0, 0, b).view(t.scalar_type()).view(t.sizes()));
  });
  x.ops.push_back(rtd_op{RTD_OP_RECV, nullptr, ptr(buf), buf.numel() / 2, RTD_FLOAT16, 0, peer});
  x.finish.keep.insert(x.finish.keep.end(), {t, buf});
}

c10::intrusive_ptr<c10d::Work> BackendRTD::run_exchange(const at::Device& device, OpType type,
                                                        const char* what, Exchange x) {
  if (x.ops.empty()) {  // nothing to move on this rank (a group of one, empty splits)
    return launch(device, type, what, std::move(x.finish), Call());
  }
  return launch(device, type, what, std::move(x.finish),
                [ops = std::move(x.ops), device](rtd_comm* comm, void* stream) {
                  return rtd_group(comm, ops.data(), static_cast<int>(ops.size()),
                                   gpu_index(device), stream);
                });
}

c10::intrusive_ptr<c10d::Work> BackendRTD::send(std::vector<at::Tensor>& tensors, int dst,
                                                int tag) {
  const char* what = "send";
  TORCH_CHECK_VALUE(tensors.size() == 1, where(what), ": one tensor per call");
  const at::Device device = device_of(tensors, what);
  Exchange x;
  add_send(x, tensors[0], dst);
  if (x.ops.empty()) {
    return run_exchange(device, OpType::SEND, what, std::move(x));
  }
  const rtd_op op = x.ops[0];
  return launch(device, OpType::SEND, what, std::move(x.finish), [=](rtd_comm* comm, void* stream) {
    return rtd_send(comm, op.in, op.count, op.dtype, dst, tag, gpu_index(device), stream);
  });
}

c10::intrusive_ptr<c10d::Work> BackendRTD::recv(std::vector<at::Tensor>& tensors, int src,
                                                int tag) {
  const char* what = "recv";
  TORCH_CHECK_VALUE(tensors.size() == 1, where(what), ": one tensor per call");
  const at::Device device = device_of(tensors, what);
  Exchange x;
  x.finish.outputs = tensors;
  add_recv(x, tensors[0], src);
  if (x.ops.empty()) {
    return run_exchange(device, OpType::RECV, what, std::move(x));
  }
  const rtd_op op = x.ops[0];
  return launch(device, OpType::RECV, what, std::move(x.finish), [=](rtd_comm* comm, void* stream) {
    return rtd_recv(comm, op.out, op.count, op.dtype, src, tag, gpu_index(device), stream);
  });
}

c10::intrusive_ptr<c10d::Work> BackendRTD::recvAnysource(std::vector<at::Tensor>&, int) {
  C10_THROW_ERROR(ValueError, where("recv") +
                                  ": receiving from any source is not supported; name the "
                                  "sender (recv(tensor, src=...))");
}

c10::intrusive_ptr<c10d::Work> BackendRTD::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::GatherOptions& opts) {
  const char* what = "gather";
  TORCH_CHECK_VALUE(inputs.size() == 1, where(what), ": one input tensor per call");
  const int root = static_cast<int>(opts.rootRank);
  const at::Device device = device_of(inputs, what);
  Exchange x;
  if (getRank() != root) {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), where(what), ": only the root (rank ",
                      root, ") passes outputs");
    add_send(x, inputs[0], root);
    return run_exchange(device, OpType::GATHER, what, std::move(x));
  }
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                    where(what), ": the root needs ", getSize(), " outputs");
  device_of(outputs[0], what);
  for (int r = 0; r < getSize(); ++r) {
    at::Tensor& o = outputs[0][r];
    TORCH_CHECK_VALUE(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type(),
                      where(what), ": output ", r, " differs from the input in size or dtype");
    if (r == root) {
      o.copy_(inputs[0].view(o.sizes()));
    } else {
      add_recv(x, o, r);
    }
  }
  x.finish.outputs = outputs[0];
  return run_exchange(device, OpType::GATHER, what, std::move(x));
}

c10::intrusive_ptr<c10d::Work> BackendRTD::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  const char* what = "scatter";
  TORCH_CHECK_VALUE(outputs.size() == 1, where(what), ": one output tensor per call");
  const int root = static_cast<int>(opts.rootRank);
  const at::Device device = device_of(outputs, what);
  Exchange x;
  x.finish.outputs = outputs;
  if (getRank() != root) {
    add_recv(x, outputs[0], root);
    return run_exchange(device, OpType::SCATTER, what, std::move(x));
  }
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    where(what), ": the root needs ", getSize(), " inputs");
  device_of(inputs[0], what);
  for (int r = 0; r < getSize(); ++r) {
    const at::Tensor& in = inputs[0][r];
    TORCH_CHECK_VALUE(in.numel() == outputs[0].numel(), where(what), ": input ", r,
                      " differs from the output in size");
    if (r == root) {
      outputs[0].copy_(in.view(outputs[0].sizes()));
    } else {
      add_send(x, in, r);
    }
  }
  return run_exchange(device, OpType::SCATTER, what, std::move(x));
}

c10::intrusive_ptr<c10d::Work> BackendRTD::alltoall(std::vector<at::Tensor>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions&) {
  const char* what = "all_to_all";
  TORCH_CHECK_VALUE(
      static_cast<int>(outputs.size()) == getSize() && static_cast<int>(inputs.size()) == getSize(),
      where(what), ": ", getSize(), " inputs and outputs are needed");
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  const at::Device device = device_of(all, what);
  Exchange x;
  x.finish.outputs = outputs;
  for (int r = 0; r < getSize(); ++r) {
    if (r == getRank()) {
      outputs[r].copy_(inputs[r].view(outputs[r].sizes()));
      continue;
    }
    add_send(x, inputs[r], r);
    add_recv(x, outputs[r], r);
  }
  return run_exchange(device, OpType::ALLTOALL, what, std::move(x));
}

c10::intrusive_ptr<c10d::Work> BackendRTD::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_splits,
                                                         std::vector<int64_t>& input_splits,
                                                         const c10d::AllToAllOptions&) {
  const char* what = "all_to_all_single";
  const at::Device device = device_of({output, input}, what);
  const int n = getSize();
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), where(what),
                   ": input and output dtypes differ");
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK_VALUE(input.numel() % n == 0 && output.numel() == input.numel(), where(what), ": ",
                      input.numel(), " elements do not split evenly over ", n, " ranks");
    if (input.is_contiguous() && output.is_contiguous()) {
      auto u = as_units(input, n);
      auto o = as_units(output, n);
      if (u && o && u->dtype == o->dtype) {
        Finish finish;
        finish.outputs = {output};
        finish.keep = {input, output, u->view, o->view};
        void* pi = ptr(u->view);
        void* po = ptr(o->view);
        const int64_t count = u->view.numel();
        const int dtype = u->dtype;
        return launch(device, OpType::ALLTOALL_BASE, what, std::move(finish),
                      [=](rtd_comm* comm, void* stream) {
                        return rtd_all_to_all(comm, pi, po, count, dtype, gpu_index(device),
                                              stream);
                      });
      }
    }
  }
  // Split along the first dimension (evenly where no sizes are given).
  auto pieces = [&](const at::Tensor& t, std::vector<int64_t> sizes, const char* which) {
    const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    if (sizes.empty()) {
      TORCH_CHECK_VALUE(rows % n == 0, where(what), ": the ", which, "'s ", rows,
                        " rows do not split over ", n, " ranks");
      sizes.assign(n, rows / n);
    }
    int64_t sum = 0;
    for (int64_t s : sizes) {
      TORCH_CHECK_VALUE(s >= 0, where(what), ": a negative split size");
      sum += s;
    }
    TORCH_CHECK_VALUE(static_cast<int>(sizes.size()) == n && sum == rows, where(what), ": the ",
                      which, " split sizes do not cover its ", rows, " rows over ", n, " ranks");
    at::Tensor flat = t.dim() > 0 ? t : t.reshape({1});
    return flat.split_with_sizes(sizes);
  };
  Exchange x;
  x.finish.outputs = {output};
  at::Tensor out = contiguous_or_staged(output, x.finish);
  std::vector<at::Tensor> ins = pieces(input.contiguous(), input_splits, "input");
  std::vector<at::Tensor> outs = pieces(out, output_splits, "output");
  for (int r = 0; r < n; ++r) {
    if (r == getRank()) {
      TORCH_CHECK_VALUE(ins[r].numel() == outs[r].numel(), where(what),
                        ": this rank's own split sizes differ between input and output");
      outs[r].copy_(ins[r]);
      continue;
    }
    add_send(x, ins[r], r);
    add_recv(x, outs[r], r);
  }
  // The copy of a non-contiguous output comes after every receive's.
  if (!output.is_contiguous()) {
    then(x.finish.after, [output, out]() mutable { output.copy_(out); });
  }
  return run_exchange(device, OpType::ALLTOALL_BASE, what, std::move(x));
}

// -- barriers -------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BackendRTD::barrier(const c10d::BarrierOptions& opts) {
  const char* what = "barrier";
  int gpu = -1;
  if (opts.device.has_value()) {
    gpu = opts.device->is_cuda() ? opts.device->index() : -1;
  } else if (!opts.device_ids.empty()) {
    gpu = static_cast<int>(opts.device_ids[0]);
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    gpu = cuda_ ? cuda_->device() : -1;
  }
  if (gpu < 0) {
    Finish finish;
    finish.blocking = true;
    return launch(at::Device(at::kCPU), OpType::BARRIER, what, std::move(finish),
                  [](rtd_comm* comm, void*) { return rtd_barrier(comm, nullptr); });
  }
  // On the GPU: an all-reduce ordered after the caller's work, whose wait()
  // blocks the host until it (and so that work) is done.
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
  at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
  Finish finish;
  finish.blocking = true;
  finish.keep = {one};
  void* p = ptr(one);
  return launch(device, OpType::BARRIER, what, std::move(finish),
                [=](rtd_comm* comm, void* stream) {
                  return rtd_all_reduce(comm, p, p, 1, RTD_INT32, RTD_SUM, gpu, stream);
                });
}

void BackendRTD::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  uint64_t round;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    round = ++monitored_rounds_;
    timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
  }
  const std::string base = "rtd/monitored/" + std::to_string(round) + "/";
  const std::string done = base + "done";
  if (getRank() != 0) {
    store_->set(base + std::to_string(getRank()), std::vector<uint8_t>{1});
    try {
      store_->wait({done}, timeout);
    } catch (const std::exception&) {
      raise_failure(where("monitored_barrier"),
                    "rank 0 did not pass the barrier within " + std::to_string(timeout.count()) +
                        " ms (a rank failed to reach it; rank 0 names which)");
    }
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < getSize(); ++r) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      store_->wait({base + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      missing.push_back(r);
      if (!wait_all_ranks) {
        break;
      }
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    raise_failure(where("monitored_barrier"), std::string("[Rank 0]: Rank") +
                                                  (missing.size() > 1 ? "s " : " ") + ranks +
                                                  " failed to pass monitoredBarrier in " +
                                                  std::to_string(timeout.count()) + " ms");
  }
  store_->set(done, std::vector<uint8_t>{1});
}

}  // namespace rtd_torch
