// The scalar AdamW, the choice of kernel, and the split over threads.
#include "sharding/cpu_adamw.h"

#include <cmath>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <vector>

#include "rt_dist/error.h"
#include "sharding/host_values.h"
#include "sharding/thread_team.h"

namespace rtd::shard::cpu {
namespace {

bool cpu_has(Kernel k) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  return k == Kernel::kScalar || (k == Kernel::kAvx2 && avx2) || (k == Kernel::kAvx512 && avx512);
#else
  return k == Kernel::kScalar;
#endif
}

// Denormal floats (below 1.2e-38) take x86 a hundred times longer than
// normal ones, and tiny gradients square into them: a model whose gradients
// are 1e-20 ran the host AdamW at 0.7 GB/s a thread instead of 7. While the
// kernel runs, this thread treats them as zero (FTZ and DAZ). A second moment
// that small is far below eps^2 (1e-16), so the update changes by nothing
// that float32 shows.
class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// Chunks of this many elements go to one thread at least: below it a thread
// costs more than it saves.
constexpr std::size_t kMinPerThread = std::size_t(1) << 16;
// A team's chunks: at most this many elements (7 MB of traffic, about 60 us
// on 16 cores), so that a slow core holds up the others by that much.
constexpr std::size_t kChunk = std::size_t(1) << 18;
// Threads from which the host AdamW is bound by memory (cpu_adamw.h).
constexpr int kMemoryBoundThreads = 8;

}  // namespace

AdamWConstants adamw_constants(const AdamWShard& s) {
  const AdamWOptions& o = s.options;
  return AdamWConstants{1.0f - std::pow(o.beta1, static_cast<float>(s.step)),
                        1.0f - std::pow(o.beta2, static_cast<float>(s.step)),
                        1.0f - o.lr * o.weight_decay};
}

void adamw_scalar(const AdamWShard& s, const AdamWConstants& k, std::size_t begin,
                  std::size_t end) {
  const AdamWOptions& o = s.options;
  auto* p = static_cast<float*>(s.param.data);
  for (std::size_t j = begin; j < end; ++j) {
    const float g = load_value(s.grad, j) * s.grad_scale;
    const float m = o.beta1 * s.m[j] + (1.0f - o.beta1) * g;
    const float v = o.beta2 * s.v[j] + (1.0f - o.beta2) * g * g;
    float x = p[j] * k.decay;
    x -= o.lr * (m / k.bc1) / (std::sqrt(v / k.bc2) + o.eps);
    s.m[j] = m;
    s.v[j] = v;
    p[j] = x;
    if (s.out.data) store_value(s.out, j, x);
  }
}

Kernel best_kernel(int threads) {
  if (threads < kMemoryBoundThreads && cpu_has(Kernel::kAvx512)) return Kernel::kAvx512;
  if (cpu_has(Kernel::kAvx2)) return Kernel::kAvx2;
  return Kernel::kScalar;
}

const char* to_string(Kernel k) {
  switch (k) {
    case Kernel::kBest:
      return "best";
    case Kernel::kScalar:
      return "scalar";
    case Kernel::kAvx2:
      return "avx2";
    case Kernel::kAvx512:
      return "avx512";
  }
  return "?";
}

const char* adamw_kernel(int threads) { return to_string(best_kernel(threads)); }
bool can_run(Kernel k) { return k == Kernel::kBest || cpu_has(k); }

namespace {

// The kernel to run, after checking the buffers: best_kernel(threads) for
// kBest; throws for one the CPU cannot run.
Kernel checked(const AdamWShard& s, Kernel kernel, int threads) {
  if (s.param.device != DeviceType::kCpu || s.grad.device != DeviceType::kCpu ||
      (s.out.data && s.out.device != DeviceType::kCpu)) {
    throw Error(ErrorCategory::kInternal, "cpu::adamw: a buffer is not in host memory");
  }
  if (kernel == Kernel::kBest) kernel = best_kernel(threads);
  if (!cpu_has(kernel))
    throw Error(
        ErrorCategory::kInvalidArgument,
        std::string("cpu::adamw: this CPU cannot run the ") + to_string(kernel) + " kernel");
  return kernel;
}

void run_kernel(const AdamWShard& s, const AdamWConstants& k, Kernel kernel, std::size_t begin,
                std::size_t end) {
  FlushDenormals flush;
  const bool done = (kernel == Kernel::kAvx512 && adamw_avx512(s, k, begin, end)) ||
                    (kernel == Kernel::kAvx2 && adamw_avx2(s, k, begin, end));
  if (!done) adamw_scalar(s, k, begin, end);
}

}  // namespace

void adamw(const AdamWShard& s, int threads, Kernel kernel) {
  // A team for this call: no helper below kMinPerThread elements a thread.
  const std::size_t parts = std::max<std::size_t>(
      1, std::min<std::size_t>(threads < 1 ? 1 : threads, s.param.count / kMinPerThread));
  ThreadTeam team(static_cast<int>(parts) - 1);
  adamw(s, team, kernel);
}

void adamw(const AdamWShard& s, ThreadTeam& team, Kernel kernel) {
  kernel = checked(s, kernel, team.size());
  const AdamWConstants k = adamw_constants(s);
  // Chunks on 64-byte boundaries (16 floats), four a thread at least.
  const std::size_t n = s.param.count;
  const std::size_t chunk = std::max<std::size_t>(
      kMinPerThread / 4, std::min(kChunk, (n / (4 * team.size()) + 15) / 16 * 16));
  team.run(n, chunk,
           [&](std::size_t begin, std::size_t end) { run_kernel(s, k, kernel, begin, end); });
}

}  // namespace rtd::shard::cpu
