// A kernel that keeps a stream busy for a while, so that tests can observe
// work that is queued but not yet done.
#include "tests/gpu/spin_kernel.h"

namespace {
__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
}  // namespace

void launch_spin(cudaStream_t stream, long long cycles) { spin<<<1, 1, 0, stream>>>(cycles); }
