// The AdamW step of a shard in host memory, at the host's memory bandwidth:
// vectorized (AVX-512F, else AVX2 with F16C, where the CPU has them, chosen at
// run time) and
// spread over threads. Every kernel does the scalar loop's operations in the
// scalar loop's order, with no fused multiply-adds, so all of them give the
// same bits (and the GPU kernel's arithmetic, shard_ops_gpu.cu, is the same),
// except that adamw() treats denormal floats as zero (cpu_adamw.cc says why).
// The offloaded optimizer steps with it while backward goes on.
#pragma once

#include <cstddef>

#include "sharding/shard_ops.h"

namespace rtd::shard::cpu {

enum class Kernel { kBest, kScalar, kAvx2, kAvx512 };

// s.param, s.grad and s.out in host memory; threads >= 1 (1: the caller's
// thread alone). Elements [0, s.param.count). kernel: the best for this CPU
// (best_kernel), or one it can run (for benchmarks and tests; one it cannot
// run throws).
void adamw(const AdamWShard& s, int threads = 1, Kernel kernel = Kernel::kBest);

// The kernel adamw() runs on this CPU: AVX-512 where it has AVX-512F, else
// AVX2, else the scalar loop. On the GPU machine's Xeons, from 8 threads on
// the two vector kernels are within 4% of each other, either way (the step is
// bound by memory); on one thread AVX-512 was up to 27% faster
// (docs/benchmarks.md, "The host AdamW's kernels").
Kernel best_kernel();
// The name of best_kernel(): "avx512", "avx2" or "scalar".
const char* adamw_kernel();
// Whether this build and CPU can run `kernel`.
bool can_run(Kernel kernel);
const char* to_string(Kernel kernel);

// The kernels themselves, on elements [begin, end) (for tests and adamw()).
struct AdamWConstants {
  float bc1, bc2, decay;  // bias corrections; 1 - lr * weight_decay
};
AdamWConstants adamw_constants(const AdamWShard& s);
void adamw_scalar(const AdamWShard& s, const AdamWConstants& k, std::size_t begin, std::size_t end);
// Without AVX2 and F16C (AVX-512F) in this build: false, nothing done. The
// caller checks the CPU (can_run).
bool adamw_avx2(const AdamWShard& s, const AdamWConstants& k, std::size_t begin, std::size_t end);
bool adamw_avx512(const AdamWShard& s, const AdamWConstants& k, std::size_t begin, std::size_t end);

}  // namespace rtd::shard::cpu
