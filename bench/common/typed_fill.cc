#include "bench/common/typed_fill.h"

#include <cstdint>

namespace rtd::bench {
namespace {

template <typename T>
void fill_typed(void* host, std::size_t count, double value) {
  T v = static_cast<T>(value);
  T* p = static_cast<T*>(host);
  for (std::size_t i = 0; i < count; ++i) p[i] = v;
}

template <typename T>
long long wrong_typed(const void* host, std::size_t count,
                      const std::function<double(std::size_t)>& expected) {
  const T* p = static_cast<const T*>(host);
  long long wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += static_cast<double>(p[i]) != expected(i);
  return wrong;
}

}  // namespace

void fill_value(void* host, DType dtype, std::size_t count, double value) {
  switch (dtype) {
    case DType::kFloat32:
      return fill_typed<float>(host, count, value);
    case DType::kFloat64:
      return fill_typed<double>(host, count, value);
    case DType::kInt32:
      return fill_typed<std::int32_t>(host, count, value);
    case DType::kInt64:
      return fill_typed<std::int64_t>(host, count, value);
    case DType::kBFloat16:
    case DType::kFloat16: {
      const float f = static_cast<float>(value);
      std::uint16_t bits = dtype == DType::kBFloat16 ? float_to_bf16(f) : float_to_f16(f);
      auto* p = static_cast<std::uint16_t*>(host);
      for (std::size_t i = 0; i < count; ++i) p[i] = bits;
      return;
    }
  }
}

long long count_wrong(const void* host, DType dtype, std::size_t count,
                      const std::function<double(std::size_t)>& expected) {
  switch (dtype) {
    case DType::kFloat32:
      return wrong_typed<float>(host, count, expected);
    case DType::kFloat64:
      return wrong_typed<double>(host, count, expected);
    case DType::kInt32:
      return wrong_typed<std::int32_t>(host, count, expected);
    case DType::kInt64:
      return wrong_typed<std::int64_t>(host, count, expected);
    case DType::kBFloat16:
    case DType::kFloat16: {
      const auto* p = static_cast<const std::uint16_t*>(host);
      auto widen = dtype == DType::kBFloat16 ? bf16_to_float : f16_to_float;
      long long wrong = 0;
      for (std::size_t i = 0; i < count; ++i) wrong += widen(p[i]) != expected(i);
      return wrong;
    }
  }
  return -1;
}

}  // namespace rtd::bench
