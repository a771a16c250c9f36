// Element types, reduction operators and BufferView: a non-owning view of
// (pointer, count, dtype, device) that every collective takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rtd {

// A new type goes at the end, its size into dtype_size's kSizes.
enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16 };
enum class ReduceOp { kSum, kAvg, kMin, kMax };
enum class DeviceType { kCpu, kCuda };

// Bytes per element (0 for a value outside the enum): four bits a type, in
// the enum's order, read by a shift (no branch, no table: every collective
// call asks it).
constexpr std::size_t dtype_size(DType dtype) {
  constexpr std::uint32_t kSizes = 4u << 0 | 8u << 4 | 4u << 8 | 8u << 12 | 2u << 16 | 2u << 20;
  const auto i = static_cast<std::uint32_t>(dtype);
  return i < 6 ? (kSizes >> (4 * i)) & 0xF : 0;
}
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

// bfloat16 and float16 (IEEE binary16) are stored as their 16 raw bits;
// conversions round to nearest even and keep infinities and NaNs.
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);
float f16_to_float(std::uint16_t bits);
// float32, bfloat16 or float16: what the reductions of a model's values take.
inline bool is_float_type(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
}

}  // namespace rtd
