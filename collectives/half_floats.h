// bfloat16 and float16 buffers through float32, for the host backends that
// reduce them in float32 and round once (Gloo, MPI).
#pragma once

#include <cstdint>
#include <vector>

#include "rt_dist/types.h"

namespace rtd {

// The 16-bit floats of `b` (bfloat16 or float16) as float32.
inline std::vector<float> widen(const BufferView& b) {
  std::vector<float> wide(b.count);
  const auto* src = static_cast<const std::uint16_t*>(b.data);
  const bool bf16 = b.dtype == DType::kBFloat16;
  for (std::size_t i = 0; i < b.count; ++i)
    wide[i] = bf16 ? bf16_to_float(src[i]) : f16_to_float(src[i]);
  return wide;
}

// out (bfloat16 or float16) = wide, rounded.
inline void narrow(const std::vector<float>& wide, const BufferView& out) {
  auto* dst = static_cast<std::uint16_t*>(out.data);
  const bool bf16 = out.dtype == DType::kBFloat16;
  for (std::size_t i = 0; i < out.count; ++i)
    dst[i] = bf16 ? float_to_bf16(wide[i]) : float_to_f16(wide[i]);
}

}  // namespace rtd
