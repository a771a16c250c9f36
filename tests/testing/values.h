// Test values that every rank can compute for every other rank, and a typed
// host buffer to hold them; exact in every dtype (small integers), so that
// sums, mins and maxes have one right answer.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rt_dist/types.h"

namespace rtd::testing_util {

// Rank r's element i: an integer in [-6, 6].
inline double value(int rank, std::size_t i, int salt) {
  return static_cast<double>(static_cast<long>((rank + 1) * 7 + i * 3 + salt) % 13) - 6.0;
}

inline double reduce_reference(ReduceOp op, int ranks, std::size_t i, int salt) {
  double acc = value(0, i, salt);
  for (int r = 1; r < ranks; ++r) {
    double v = value(r, i, salt);
    if (op == ReduceOp::kMin)
      acc = std::min(acc, v);
    else if (op == ReduceOp::kMax)
      acc = std::max(acc, v);
    else
      acc += v;
  }
  return op == ReduceOp::kAvg ? acc / ranks : acc;
}

inline double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<float>(v);
    case DType::kBFloat16:
      return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    case DType::kFloat16:
      return f16_to_float(float_to_f16(static_cast<float>(v)));
    default:
      return v;
  }
}

inline double tolerance(DType dtype, double expected) {
  if (dtype == DType::kBFloat16) return std::fabs(expected) / 128.0 + 1e-6;
  if (dtype == DType::kFloat16) return std::fabs(expected) / 1024.0 + 1e-6;
  if (dtype == DType::kFloat32) return std::fabs(expected) * 1e-6 + 1e-6;
  return 1e-9;
}

struct Buffer {
  DType dtype;
  std::size_t count;
  std::vector<std::uint8_t> bytes;

  Buffer(DType d, std::size_t n) : dtype(d), count(n), bytes(n * dtype_size(d)) {}
  BufferView view() { return BufferView{.data = bytes.data(), .count = count, .dtype = dtype}; }
  void* at(std::size_t i) { return bytes.data() + i * dtype_size(dtype); }

  void set(std::size_t i, double v) {
    switch (dtype) {
      case DType::kFloat32: {
        float x = static_cast<float>(v);
        std::memcpy(at(i), &x, 4);
        break;
      }
      case DType::kFloat64:
        std::memcpy(at(i), &v, 8);
        break;
      case DType::kInt32: {
        std::int32_t x = static_cast<std::int32_t>(v);
        std::memcpy(at(i), &x, 4);
        break;
      }
      case DType::kInt64: {
        std::int64_t x = static_cast<std::int64_t>(v);
        std::memcpy(at(i), &x, 8);
        break;
      }
      case DType::kBFloat16:
      case DType::kFloat16: {
        const float f = static_cast<float>(v);
        std::uint16_t x = dtype == DType::kBFloat16 ? float_to_bf16(f) : float_to_f16(f);
        std::memcpy(at(i), &x, 2);
        break;
      }
    }
  }
  double get(std::size_t i) const {
    const void* p = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::kFloat32: {
        float x;
        std::memcpy(&x, p, 4);
        return x;
      }
      case DType::kFloat64: {
        double x;
        std::memcpy(&x, p, 8);
        return x;
      }
      case DType::kInt32: {
        std::int32_t x;
        std::memcpy(&x, p, 4);
        return x;
      }
      case DType::kInt64: {
        std::int64_t x;
        std::memcpy(&x, p, 8);
        return x;
      }
      case DType::kBFloat16:
      case DType::kFloat16: {
        std::uint16_t x;
        std::memcpy(&x, p, 2);
        return dtype == DType::kBFloat16 ? bf16_to_float(x) : f16_to_float(x);
      }
    }
    return 0;
  }
  void fill_rank(int rank, int salt) {
    for (std::size_t i = 0; i < count; ++i) set(i, value(rank, i, salt));
  }
};

}  // namespace rtd::testing_util
