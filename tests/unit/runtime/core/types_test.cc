#include "rt_dist/types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace rtd {
namespace {

TEST(DType, SizesMatchTheirCTypes) {
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_EQ(dtype_size(DType::kInt32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_EQ(to_string(DType::kFloat16), "float16");
  // A value outside the enum (a corrupt header, a newer peer) has no size.
  EXPECT_EQ(dtype_size(static_cast<DType>(6)), 0u);
  EXPECT_EQ(dtype_size(static_cast<DType>(-1)), 0u);
  EXPECT_EQ(dtype_size(static_cast<DType>(1000)), 0u);
  static_assert(dtype_size(DType::kFloat64) == sizeof(double));
  float f[3];
  EXPECT_EQ(view(f, 3).bytes(), 12u);
}

TEST(BFloat16, SmallIntegersRoundTripExactly) {
  for (int i = -256; i <= 256; ++i) {
    EXPECT_EQ(bf16_to_float(float_to_bf16(static_cast<float>(i))), static_cast<float>(i));
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 200)), 1.0f + 1.0f / 128);
}

TEST(BFloat16, NanStaysNanAndInfinityStaysInfinity) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
}

TEST(Float16, IntegersUpTo2048RoundTripExactly) {
  for (int i = -2048; i <= 2048; ++i) {
    EXPECT_EQ(f16_to_float(float_to_f16(static_cast<float>(i))), static_cast<float>(i));
  }
}

TEST(Float16, KnownBitPatterns) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);  // the largest finite
  EXPECT_EQ(float_to_f16(0.5f), 0x3800);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  EXPECT_EQ(f16_to_float(0x03ff), std::ldexp(1023.0f, -24));
}

TEST(Float16, RoundsToNearestEvenAndSaturatesToInfinity) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3 * 2^-11: halfway between 1 + 2^-10 and 1 + 2^-9; ties go to 1 + 2^-9.
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(f16_to_float(float_to_f16(65520.0f)), std::numeric_limits<float>::infinity())
      << "halfway past the largest finite rounds up to infinity";
  EXPECT_EQ(f16_to_float(float_to_f16(65519.0f)), 65504.0f);
  EXPECT_EQ(f16_to_float(float_to_f16(1e6f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_float(float_to_f16(std::ldexp(1.0f, -26))), 0.0f) << "underflow to zero";
  EXPECT_EQ(f16_to_float(float_to_f16(std::ldexp(3.0f, -26))), std::ldexp(1.0f, -24))
      << "0.75 of the smallest subnormal rounds up to it";
}

TEST(Float16, NanStaysNanAndInfinityStaysInfinity) {
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f16_to_float(float_to_f16(-std::numeric_limits<float>::infinity())),
            -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace rtd
