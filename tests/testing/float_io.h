// Floating-point buffers (float32, bfloat16 or float16) of a test's Memory,
// read into and written from floats through the host.
#pragma once

#include <cstdint>
#include <vector>

#include "rt_dist/types.h"
#include "tests/testing/memory.h"

namespace rtd::testing_util {

inline std::vector<float> read_floats(Memory& memory, const BufferView& b) {
  std::vector<float> out(b.count);
  if (b.dtype == DType::kFloat32) {
    memory.to_host(out.data(), b.data, b.bytes());
    return out;
  }
  std::vector<std::uint16_t> bits(b.count);
  memory.to_host(bits.data(), b.data, b.bytes());
  for (std::size_t j = 0; j < bits.size(); ++j)
    out[j] = b.dtype == DType::kBFloat16 ? bf16_to_float(bits[j]) : f16_to_float(bits[j]);
  return out;
}

inline void write_floats(Memory& memory, const BufferView& b, const std::vector<float>& values) {
  if (b.dtype == DType::kFloat32) {
    memory.to_device(b.data, values.data(), b.bytes());
    return;
  }
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t j = 0; j < bits.size(); ++j)
    bits[j] = b.dtype == DType::kBFloat16 ? float_to_bf16(values[j]) : float_to_f16(values[j]);
  memory.to_device(b.data, bits.data(), b.bytes());
}

}  // namespace rtd::testing_util
