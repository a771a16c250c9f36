// One element of a float32, bfloat16 or float16 buffer in host memory, read
// as or written from a float: what the host halves of the element-wise work
// (shard_ops.cc, cpu_adamw.cc) share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rt_dist/types.h"

namespace rtd::shard {

inline float load_value(const BufferView& b, std::size_t j) {
  if (b.dtype == DType::kFloat32) return static_cast<const float*>(b.data)[j];
  const std::uint16_t bits = static_cast<const std::uint16_t*>(b.data)[j];
  return b.dtype == DType::kBFloat16 ? bf16_to_float(bits) : f16_to_float(bits);
}

inline void store_value(const BufferView& b, std::size_t j, float value) {
  if (b.dtype == DType::kFloat32)
    static_cast<float*>(b.data)[j] = value;
  else
    static_cast<std::uint16_t*>(b.data)[j] =
        b.dtype == DType::kBFloat16 ? float_to_bf16(value) : float_to_f16(value);
}

}  // namespace rtd::shard
