#include "tensor_bytes.h"

#include <ATen/ATen.h>

#include "rt_dist/c_api.h"

namespace rtd_torch {

int reduce_code(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return RTD_FLOAT32;
    case at::kDouble:
      return RTD_FLOAT64;
    case at::kInt:
      return RTD_INT32;
    case at::kLong:
      return RTD_INT64;
    case at::kBFloat16:
      return RTD_BFLOAT16;
    case at::kHalf:
      return RTD_FLOAT16;
    default:
      return -1;
  }
}

at::Tensor bytes_of(const at::Tensor& contiguous) {
  if (contiguous.dim() == 0) {
    return contiguous.reshape({1}).view(at::kByte);
  }
  return contiguous.reshape({-1}).view(at::kByte);
}

std::optional<Units> as_units(const at::Tensor& contiguous, int64_t parts) {
  const int64_t bytes = contiguous.numel() * static_cast<int64_t>(contiguous.element_size());
  if (parts <= 0 || bytes % parts != 0) {
    return std::nullopt;
  }
  // A view of another dtype must start at a multiple of its width.
  const int64_t offset =
      contiguous.storage_offset() * static_cast<int64_t>(contiguous.element_size());
  const int64_t part = bytes / parts;
  if (part % 4 == 0 && offset % 4 == 0) {
    return Units{bytes_of(contiguous).view(at::kInt), RTD_INT32};
  }
  if (part % 2 == 0 && offset % 2 == 0) {
    return Units{bytes_of(contiguous).view(at::kHalf), RTD_FLOAT16};
  }
  return std::nullopt;
}

void then(std::function<void()>& chain, std::function<void()> next) {
  if (!chain) {
    chain = std::move(next);
    return;
  }
  chain = [first = std::move(chain), second = std::move(next)] {
    first();
    second();
  };
}

void first(std::function<void()>& chain, std::function<void()> step) {
  std::function<void()> rest = std::move(chain);
  chain = std::move(step);
  if (rest) {
    then(chain, std::move(rest));
  }
}

}  // namespace rtd_torch
