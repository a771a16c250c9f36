// BackendRTD's moves: broadcast and the all-gathers.
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
    first(finish.after, [c, buf, b]() mutable { bytes_of(c).copy_(buf.narrow(0, 0, b)); });
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
  // outputs[r][k]: rank r's piece of input k (Gloo's layout).
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize(), where(what), ": ",
                    outputs.size(), " output lists, one per rank (", getSize(), ") needed");
  const at::Device device = device_of(inputs, what);
  // Every input's bytes end to end, gathered once, then cut per rank and tensor.
  std::vector<at::Tensor> parts;
  std::vector<int64_t> sizes;
  for (const at::Tensor& t : inputs) {
    parts.push_back(bytes_of(t.contiguous()));
    sizes.push_back(parts.back().numel());
  }
  Finish finish;
  for (const auto& list : outputs) {
    TORCH_CHECK_VALUE(list.size() == inputs.size(), where(what), ": an output list holds ",
                      list.size(), " tensors, not one per input (", inputs.size(), ")");
    for (size_t k = 0; k < list.size(); ++k) {
      TORCH_CHECK_VALUE(list[k].numel() * static_cast<int64_t>(list[k].element_size()) == sizes[k],
                        where(what), ": output ", k, " has ", list[k].numel(), " x ",
                        list[k].scalar_type(), ", input ", k, " has ", inputs[k].numel(), " x ",
                        inputs[k].scalar_type());
    }
    finish.outputs.insert(finish.outputs.end(), list.begin(), list.end());
  }
  at::Tensor in = at::cat(parts);
  const int64_t total = in.numel();
  at::Tensor gathered = at::empty({getSize() * total}, in.options());
  Call call = all_gather_call(in, gathered, finish);
  then(finish.after, [outputs, gathered, sizes, total]() mutable {
    for (size_t r = 0; r < outputs.size(); ++r) {
      int64_t offset = static_cast<int64_t>(r) * total;
      for (size_t k = 0; k < outputs[r].size(); ++k) {
        at::Tensor& o = outputs[r][k];
        o.copy_(gathered.narrow(0, offset, sizes[k]).view(o.scalar_type()).view(o.sizes()));
        offset += sizes[k];
      }
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

}  // namespace rtd_torch
