// BackendRTD's sends and receives, and what is built of them: gather, scatter, all-to-all.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <utility>

#include "backend.h"
#include "backend_ops.h"
#include "errors.h"
#include "tensor_bytes.h"

namespace rtd_torch {

using c10d::OpType;
using c10d::ReduceOp;

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

c10::intrusive_ptr<c10d::Work> BackendRTD::exchange_with_self(OpType type, const at::Tensor& t,
                                                              int tag) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool sending = type == OpType::SEND;
  auto& others = sending ? self_recvs_ : self_sends_;  // the halves this one can match
  auto work = c10::make_intrusive<LocalWork>(
      type, sending ? "send" : "recv", getRank(),
      sending ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{t});
  auto waiting = others.find(tag);
  if (waiting == others.end()) {
    (sending ? self_sends_ : self_recvs_)[tag].push_back(SelfHalf{t, work});
    return work;
  }
  SelfHalf other = std::move(waiting->second.front());
  waiting->second.pop_front();
  if (waiting->second.empty()) {
    others.erase(waiting);  // no tag stays behind once matched
  }
  const at::Tensor& from = sending ? t : other.tensor;
  const at::Tensor& to = sending ? other.tensor : t;
  if (from.numel() != to.numel() || from.scalar_type() != to.scalar_type()) {
    // Both halves fail: the one posted first is waited for elsewhere.
    const std::string message = where(sending ? "send" : "recv") + " to this rank itself (tag " +
                                std::to_string(tag) + "): " + std::to_string(from.numel()) + " x " +
                                c10::toString(from.scalar_type()) + " sent, " +
                                std::to_string(to.numel()) + " x " +
                                c10::toString(to.scalar_type()) + " received";
    const c10::ValueError error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
    other.work->complete(std::make_exception_ptr(error));
    throw error;
  }
  to.copy_(from.reshape(to.sizes()));
  other.work->complete();
  work->complete();
  return work;
}

void BackendRTD::startCoalescing() {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!batch_, where("startCoalescing"), ": a batch is open already");
  batch_.emplace();
  batch_device_.reset();
  batch_launched_.clear();
}

c10::intrusive_ptr<c10d::Work> BackendRTD::endCoalescing() {
  std::optional<Exchange> batch;
  std::optional<at::Device> device;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(batch_, where("endCoalescing"), ": no batch is open");
    batch.swap(batch_);
    device.swap(batch_device_);
    works.swap(batch_launched_);
  }
  if (device) {  // sends and receives were queued (not only with this rank itself)
    works.push_back(
        run_exchange(*device, OpType::COALESCED, "batch_isend_irecv", std::move(*batch)));
  }
  if (works.size() == 1) {
    return works[0];
  }
  if (works.empty()) {
    return LocalWork::done(OpType::COALESCED, "batch_isend_irecv", getRank());
  }
  return c10::make_intrusive<BatchWork>(std::move(works));
}

c10::intrusive_ptr<c10d::Work> BackendRTD::queue_in_batch(const at::Device& device, OpType type,
                                                          const at::Tensor& t, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!batch_) {
    return nullptr;
  }
  const char* what = type == OpType::SEND ? "send" : "recv";
  TORCH_CHECK_VALUE(!batch_device_ || *batch_device_ == device, where(what), ": a batch on ",
                    batch_device_->str(), " and a tensor on ", device.str(),
                    "; one batch runs on one device");
  batch_device_ = device;
  if (type == OpType::SEND) {
    add_send(*batch_, t, peer);
  } else {
    batch_->finish.outputs.push_back(t);
    add_recv(*batch_, t, peer);
  }
  return LocalWork::done(type, what, getRank());
}

c10::intrusive_ptr<c10d::Work> BackendRTD::send(std::vector<at::Tensor>& tensors, int dst,
                                                int tag) {
  const char* what = "send";
  TORCH_CHECK_VALUE(tensors.size() == 1, where(what), ": one tensor per call");
  const at::Device device = device_of(tensors, what);
  if (dst == getRank()) {
    return exchange_with_self(OpType::SEND, tensors[0], tag);
  }
  if (auto queued = queue_in_batch(device, OpType::SEND, tensors[0], dst)) {
    return queued;
  }
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
  if (src == getRank()) {
    return exchange_with_self(OpType::RECV, tensors[0], tag);
  }
  if (auto queued = queue_in_batch(device, OpType::RECV, tensors[0], src)) {
    return queued;
  }
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

// From whichever other rank sends first (Gloo's receive from any of them);
// the Work's sourceRank() names it once done.
c10::intrusive_ptr<c10d::Work> BackendRTD::recvAnysource(std::vector<at::Tensor>& tensors,
                                                         int tag) {
  const char* what = "recv";
  TORCH_CHECK_VALUE(tensors.size() == 1, where(what), ": one tensor per call");
  const at::Device device = device_of(tensors, what);
  TORCH_CHECK_VALUE(device.is_cpu(), where(what),
                    ": a receive from any source takes a CPU tensor; on GPUs name the sender "
                    "(recv(tensor, src=...))");
  TORCH_CHECK_VALUE(tensors[0].numel() > 0, where(what),
                    ": a receive from any source needs a tensor of at least one element");
  return recv(tensors, -1, tag);
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
  add_gather_at_root(x, outputs[0], inputs[0], root, what);
  x.finish.outputs = outputs[0];
  return run_exchange(device, OpType::GATHER, what, std::move(x));
}

void BackendRTD::add_gather_at_root(Exchange& x, const std::vector<at::Tensor>& outputs,
                                    const at::Tensor& input, int root, const char* what) {
  for (int r = 0; r < getSize(); ++r) {
    const at::Tensor& o = outputs[r];
    TORCH_CHECK_VALUE(o.numel() == input.numel() && o.scalar_type() == input.scalar_type(),
                      where(what), ": output ", r, " differs from the input in size or dtype");
    if (r == root) {
      o.copy_(input.reshape(o.sizes()));
    } else {
      add_recv(x, o, r);
    }
  }
}

#if RTD_TORCH_HAS_GATHER_SINGLE
c10::intrusive_ptr<c10d::Work> BackendRTD::gather_single(at::Tensor& output, at::Tensor& input,
                                                         const c10d::GatherOptions& opts) {
  const char* what = "gather_single";
  const int root = static_cast<int>(opts.rootRank);
  const at::Device device = device_of({input}, what);
  Exchange x;
  if (getRank() != root) {  // torch passes an empty output here
    add_send(x, input, root);
    return run_exchange(device, OpType::GATHER, what, std::move(x));
  }
  device_of({output}, what);
  TORCH_CHECK_VALUE(
      output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
      where(what), ": the root's output must hold ", getSize(), " inputs of ", input.numel(), " ",
      input.scalar_type(), " (it holds ", output.numel(), " ", output.scalar_type(), ")");
  at::Tensor rows = contiguous_or_staged(output, x.finish).view({getSize(), input.numel()});
  add_gather_at_root(x, rows.unbind(0), input.reshape(-1), root, what);
  x.finish.outputs = {output};
  return run_exchange(device, OpType::GATHER, what, std::move(x));
}
#endif

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

}  // namespace rtd_torch
