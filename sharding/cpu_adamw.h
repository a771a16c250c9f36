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

class ThreadTeam;

// s.param, s.grad and s.out in host memory; threads >= 1 (1: the caller's
// thread alone; more: a team of them for this call). Elements [0,
// s.param.count). kernel: the best for this CPU (best_kernel), or one it can
// run (for benchmarks and tests; one it cannot run throws).
void adamw(const AdamWShard& s, int threads = 1, Kernel kernel = Kernel::kBest);
// The same on a team kept across calls (the offloaded optimizer's, unit after
// unit): the elements in chunks that go to whichever thread is free.
void adamw(const AdamWShard& s, ThreadTeam& team, Kernel kernel = Kernel::kBest);

// The kernel adamw() runs with `threads` threads on this CPU: AVX-512 below
// 8 threads, AVX2 from 8, else what the CPU has. From 8 threads on the step is
// bound by memory, and on four of the GPU machine's hosts AVX-512 ranged from
// 15% slower than AVX2 to 4% faster there (its clock drops on some); on one
// thread it was 3-27% faster (411ccc3:docs/benchmarks.md, "The host AdamW's kernels").
Kernel best_kernel(int threads);
// The name of best_kernel(threads): "avx512", "avx2" or "scalar".
const char* adamw_kernel(int threads = 1);
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
