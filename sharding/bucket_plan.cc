// plan_buckets: greedy packing in reverse registration order.
#include "sharding/bucket_plan.h"

namespace rtd {

BucketPlan plan_buckets(const std::vector<std::size_t>& counts, std::size_t element_size,
                        std::size_t first_cap_bytes, std::size_t cap_bytes) {
  BucketPlan plan;
  plan.slots.resize(counts.size());
  std::size_t used = 0;  // bytes in the open bucket
  for (int i = static_cast<int>(counts.size()) - 1; i >= 0; --i) {
    std::size_t bytes = counts[i] * element_size;
    bool need_new = plan.bucket_counts.empty();
    if (!need_new) {
      std::size_t cap = plan.bucket_counts.size() == 1 ? first_cap_bytes : cap_bytes;
      need_new = used > 0 && used + bytes > cap;
    }
    if (need_new) {
      plan.bucket_counts.push_back(0);
      plan.members.emplace_back();
      used = 0;
    }
    int b = static_cast<int>(plan.bucket_counts.size()) - 1;
    plan.slots[i] = BucketSlot{b, plan.bucket_counts[b]};
    plan.bucket_counts[b] += counts[i];
    plan.members[b].push_back(i);
    used += bytes;
  }
  return plan;
}

}  // namespace rtd
