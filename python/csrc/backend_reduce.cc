// BackendRTD's reductions: all-reduce, reduce, reduce-scatter.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "backend.h"
#include "backend_ops.h"
#include "errors.h"
#include "tensor_bytes.h"

namespace rtd_torch {

using c10d::OpType;
using c10d::ReduceOp;

// -- all-reduce and reduce -------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BackendRTD::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].is_sparse()) {
    return all_reduce_sparse(tensors[0], opts.reduceOp);
  }
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
    first(finish.after, [c, w]() mutable { c.copy_(w); });
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

c10::intrusive_ptr<c10d::Work> BackendRTD::all_reduce_sparse(at::Tensor& t, const ReduceOp& op) {
  const char* what = "all_reduce";
  TORCH_CHECK_VALUE(op.op_ == ReduceOp::SUM, where(what), ": a sparse tensor reduces by SUM only (",
                    op.op_, " asked)");
  TORCH_CHECK_VALUE(t.layout() == at::kSparse, where(what),
                    ": sparse layouts other than COO are not supported");
  const at::Device device = device_of({t}, what);
  const at::Tensor mine = t.coalesce();
  const at::Tensor indices = mine._indices();
  const at::Tensor values = mine._values();
  auto gather = [this](at::Tensor in) {  // every rank's `in`, stacked; waited for here
    in = in.contiguous();
    at::Tensor out = at::empty({getSize() * in.numel()}, in.options());
    _allgather_base(out, in, c10d::AllgatherOptions())->wait();
    return out.view([&] {
      std::vector<int64_t> shape{getSize()};
      shape.insert(shape.end(), in.sizes().begin(), in.sizes().end());
      return shape;
    }());
  };
  // How many entries each rank holds, then everyone's, padded to the most.
  const at::Tensor counts = gather(at::full({1}, mine._nnz(), indices.options())).cpu();
  const int64_t most = counts.max().item<int64_t>();
  auto padded = [most](const at::Tensor& x, int64_t dim) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape[dim] = most;
    at::Tensor out = at::zeros(shape, x.options());
    out.narrow(dim, 0, x.size(dim)).copy_(x);
    return out;
  };
  const at::Tensor all_indices = gather(padded(indices, 1));  // [size, dims, most]
  const at::Tensor all_values = gather(padded(values, 0));    // [size, most, ...]
  std::vector<at::Tensor> index_parts, value_parts;
  for (int r = 0; r < getSize(); ++r) {
    const int64_t n = counts[r].item<int64_t>();
    index_parts.push_back(all_indices[r].narrow(1, 0, n));
    value_parts.push_back(all_values[r].narrow(0, 0, n));
  }
  const at::Tensor sum =
      at::sparse_coo_tensor(at::cat(index_parts, 1), at::cat(value_parts, 0), t.sizes()).coalesce();
  t.copy_(sum);
  Finish finish;
  finish.outputs = {t};
  return launch(device, OpType::ALLREDUCE, what, std::move(finish), nullptr);
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

// -- reduce-scatter ---------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BackendRTD::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_flat(output, input, opts, nullptr, output, "reduce_scatter_tensor");
}

c10::intrusive_ptr<c10d::Work> BackendRTD::reduce_scatter_flat(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts,
    std::function<void()> last, const at::Tensor& result, const char* what) {
  const at::Device device = device_of({output, input}, what);
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), where(what), ": input has ",
                    input.numel(), " elements, not ", getSize(), " x ", output.numel());
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), where(what),
                   ": input and output dtypes differ");
  const int code = reduce_op_code(opts.reduceOp);
  TORCH_CHECK_VALUE(code >= 0, where(what), ": the reduction ", opts.reduceOp.op_,
                    " is not supported (SUM, AVG, MIN, MAX)");
  Finish finish;
  finish.outputs = {result};
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
    first(finish.after, [out, wo]() mutable { out.copy_(wo); });
  }
  const int dtype = reduce_code(wi.scalar_type());
  TORCH_CHECK_TYPE(dtype >= 0, where(what), ": dtype ", input.scalar_type(),
                   " cannot be reduced (floating, integer, bool and complex types can)");
  if (last) {
    then(finish.after, std::move(last));
  }
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
  const char* what = "reduce_scatter";
  TORCH_CHECK_VALUE(outputs.size() == 1 && inputs.size() == 1, where(what),
                    ": one output tensor per call");
  TORCH_CHECK_VALUE(static_cast<int>(inputs[0].size()) == getSize(), where(what), ": ",
                    inputs[0].size(), " inputs, not one per rank (", getSize(), ")");
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : inputs[0]) {
    if (t.numel() != out.numel()) {
      return reduce_scatter_uneven(out, inputs[0], opts);
    }
    parts.push_back(t.reshape({-1}));
  }
  at::Tensor flat = at::cat(parts);
  return reduce_scatter_flat(out, flat, opts, nullptr, out, what);
}

c10::intrusive_ptr<c10d::Work> BackendRTD::reduce_scatter_uneven(
    at::Tensor& output, const std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter";
  TORCH_CHECK_VALUE(inputs[getRank()].numel() == output.numel(), where(what), ": the output has ",
                    output.numel(), " elements, this rank's input ", inputs[getRank()].numel());
  int64_t largest = 0;
  for (const at::Tensor& t : inputs) {
    largest = std::max(largest, t.numel());
  }
  at::Tensor flat = at::zeros({getSize() * largest}, output.options());
  for (int r = 0; r < getSize(); ++r) {
    flat.narrow(0, r * largest, inputs[r].numel()).copy_(inputs[r].reshape({-1}));
  }
  at::Tensor padded = at::empty({largest}, output.options());
  auto copy_out = [output, padded]() mutable {
    output.copy_(padded.narrow(0, 0, output.numel()).view(output.sizes()));
  };
  return reduce_scatter_flat(padded, flat, opts, copy_out, output, what);
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

}  // namespace rtd_torch
