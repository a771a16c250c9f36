// Element types, reduction operators and BufferView: a non-owning view of
// (pointer, count, dtype, device) that every collective takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rtd {

enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBFloat16 };
enum class ReduceOp { kSum, kAvg, kMin, kMax };
enum class DeviceType { kCpu, kCuda };

std::size_t dtype_size(DType dtype);
std::string_view to_string(DType dtype);
std::string_view to_string(ReduceOp op);

struct BufferView {
  void* data = nullptr;
  std::size_t count = 0;  // elements, not bytes
  DType dtype = DType::kFloat32;
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;

  std::size_t bytes() const { return count * dtype_size(dtype); }
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::kInt64;
}

template <typename T>
BufferView view(T* data, std::size_t count) {
  return BufferView{.data = data, .count = count, .dtype = dtype_of<T>()};
}

// bfloat16 is stored as its 16 raw bits; conversions round to nearest even.
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);

}  // namespace rtd
