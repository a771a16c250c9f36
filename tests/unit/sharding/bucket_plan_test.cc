#include "sharding/bucket_plan.h"

#include <gtest/gtest.h>

namespace rtd {
namespace {

TEST(BucketPlan, ReverseOrderSmallFirstBucketThenCap) {
  // 6 parameters of 100 floats (400 bytes each); first cap 500 B, cap 1000 B.
  BucketPlan p = plan_buckets(std::vector<std::size_t>(6, 100), 4, 500, 1000);
  ASSERT_EQ(p.bucket_counts.size(), 4u);
  EXPECT_EQ(p.members[0], (std::vector<int>{5}));     // 400 B; a second would pass 500 B
  EXPECT_EQ(p.members[1], (std::vector<int>{4, 3}));  // 800 B
  EXPECT_EQ(p.members[2], (std::vector<int>{2, 1}));
  EXPECT_EQ(p.members[3], (std::vector<int>{0}));
  EXPECT_EQ(p.slots[3].bucket, 1);
  EXPECT_EQ(p.slots[3].offset, 100u);
  EXPECT_EQ(p.slots[4].offset, 0u);
  EXPECT_EQ(p.bucket_counts[1], 200u);
}

TEST(BucketPlan, ParameterLargerThanTheCapGetsABucketOfItsOwn) {
  BucketPlan p = plan_buckets({10, 100000, 10}, 4, 64, 1000);
  ASSERT_EQ(p.bucket_counts.size(), 3u);
  EXPECT_EQ(p.members[1], (std::vector<int>{1}));
  EXPECT_EQ(p.bucket_counts[1], 100000u);
}

}  // namespace
}  // namespace rtd
