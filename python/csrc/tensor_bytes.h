// Tensors as what librt_dist carries: it reduces float32, float64, int32,
// int64, bfloat16 and float16, and moves any bytes as int32 or float16
// units. A move of an odd number of bytes goes through a padded staging
// buffer.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>

namespace rtd_torch {

// The C API's code of a dtype it reduces; -1 for any other.
int reduce_code(at::ScalarType type);

// A contiguous tensor's bytes as a 1-D uint8 tensor (no copy).
at::Tensor bytes_of(const at::Tensor& contiguous);

// A contiguous tensor's bytes as 1-D units librt_dist moves (int32 when
// each of its `parts` equal parts is a multiple of 4 bytes, float16 when of
// 2; no copy), or nothing when a part's bytes are odd.
struct Units {
  at::Tensor view;
  int dtype;
};
std::optional<Units> as_units(const at::Tensor& contiguous, int64_t parts = 1);

// Appends `next` to a chain of finishing steps.
void then(std::function<void()>& chain, std::function<void()> next);
// Puts `step` ahead of a chain of finishing steps.
void first(std::function<void()>& chain, std::function<void()> step);

}  // namespace rtd_torch
