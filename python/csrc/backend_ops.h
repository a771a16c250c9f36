// What BackendRTD's operations share: librt_dist's codes of torch's
// reductions, and a contiguous stand-in for a tensor that is not.
#pragma once

#include <ATen/core/Tensor.h>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "rt_dist/c_api.h"
#include "tensor_bytes.h"
#include "work.h"

namespace rtd_torch {

using ReduceOp = c10d::ReduceOp;

// librt_dist's code of a reduction it runs itself; -1 for the others.
inline int reduce_op_code(const ReduceOp& op) {
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

inline bool reduced_by_gathering(const ReduceOp& op) {
  return op.op_ == ReduceOp::PRODUCT || op.op_ == ReduceOp::BAND || op.op_ == ReduceOp::BOR ||
         op.op_ == ReduceOp::BXOR;
}

// Integer (and bool) dtypes librt_dist does not reduce: reduced in int32.
inline bool widened(at::ScalarType type) {
  return type == at::kBool || type == at::kByte || type == at::kChar || type == at::kShort ||
         type == at::kUInt16;
}

inline void* ptr(const at::Tensor& t) { return t.data_ptr(); }

// The C API's device argument: the GPU, or -1 for host memory.
inline int gpu_index(const at::Device& device) { return device.is_cuda() ? device.index() : -1; }

inline at::Tensor contiguous_or_staged(const at::Tensor& t, Finish& finish) {
  if (t.is_contiguous()) {
    return t;
  }
  at::Tensor c = t.contiguous();
  then(finish.after, [t, c]() mutable { t.copy_(c); });
  return c;
}

}  // namespace rtd_torch
