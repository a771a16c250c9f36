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

}  // namespace
}  // namespace rtd
