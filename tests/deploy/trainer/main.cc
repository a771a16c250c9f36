// The smallest trainer: every rank adds its rank; rank 0 prints the sum.
#include <cstdio>

#include "rt_dist/rt_dist.h"

int main() {
  auto ctx = rtd::init({.backend = rtd::Backend::kGloo});
  float value = static_cast<float>(ctx->rank());
  ctx->comm().all_reduce(rtd::view(&value, 1), rtd::ReduceOp::kSum)->wait();
  if (ctx->rank() == 0) std::printf("sum of ranks %.0f over %d ranks\n", value, ctx->world_size());
  return 0;
}
