// BucketPlan: which parameters go into which gradient bucket, and where. Buckets
// follow reverse registration order (backward produces the last parameters'
// gradients first); the first bucket is capped at first_cap bytes, the rest at cap.
#pragma once

#include <cstddef>
#include <vector>

namespace rtd {

struct BucketSlot {
  int bucket = 0;
  std::size_t offset = 0;  // elements from the bucket's start
};

struct BucketPlan {
  std::vector<BucketSlot> slots;           // per parameter
  std::vector<std::size_t> bucket_counts;  // elements per bucket
  std::vector<std::vector<int>> members;   // parameters of each bucket
};

// counts: elements of each parameter; element_size: bytes of one gradient element.
// A parameter larger than a cap gets a bucket of its own.
BucketPlan plan_buckets(const std::vector<std::size_t>& counts, std::size_t element_size,
                        std::size_t first_cap_bytes, std::size_t cap_bytes);

}  // namespace rtd
