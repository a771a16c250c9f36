// The AdamW step of a shard in host memory, at the host's memory bandwidth:
// vectorized (AVX2 with F16C where the CPU has them, chosen at run time) and
// spread over threads. Every kernel does the scalar loop's operations in the
// scalar loop's order, with no fused multiply-adds, so all of them give the
// same bits (and the GPU kernel's arithmetic, shard_ops_gpu.cu, is the same),
// except that adamw() treats denormal floats as zero (cpu_adamw.cc says why).
// The offloaded optimizer steps with it while backward goes on.
#pragma once

#include <cstddef>

#include "sharding/shard_ops.h"

namespace rtd::shard::cpu {

// s.param, s.grad and s.out in host memory; threads >= 1 (1: the caller's
// thread alone). Elements [0, s.param.count).
void adamw(const AdamWShard& s, int threads = 1);

// The kernel adamw() runs on this CPU: "avx2" or "scalar".
const char* adamw_kernel();

// The kernels themselves, on elements [begin, end) (for tests and adamw()).
struct AdamWConstants {
  float bc1, bc2, decay;  // bias corrections; 1 - lr * weight_decay
};
AdamWConstants adamw_constants(const AdamWShard& s);
void adamw_scalar(const AdamWShard& s, const AdamWConstants& k, std::size_t begin, std::size_t end);
// Without AVX2 and F16C in this build or on this CPU: false, nothing done.
bool adamw_avx2(const AdamWShard& s, const AdamWConstants& k, std::size_t begin, std::size_t end);

}  // namespace rtd::shard::cpu
