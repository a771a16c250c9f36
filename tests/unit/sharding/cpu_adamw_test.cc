// The host AdamW: the vectorized kernel and the threaded split give the
// scalar loop's bits, for every gradient and output dtype, every tail length
// and special values.
#include "sharding/cpu_adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace rtd::shard {
namespace {

struct Case {
  std::vector<float> p, m, v;
  std::vector<std::uint8_t> g, out;
  DType gdt, odt;
  bool with_out;
};

std::size_t bytes_of(DType d) { return d == DType::kFloat32 ? 4 : 2; }

void put(std::vector<std::uint8_t>& buf, DType d, std::size_t j, float x) {
  if (d == DType::kFloat32) {
    std::memcpy(buf.data() + 4 * j, &x, 4);
  } else {
    std::uint16_t h = d == DType::kBFloat16 ? float_to_bf16(x) : float_to_f16(x);
    std::memcpy(buf.data() + 2 * j, &h, 2);
  }
}

Case make(std::size_t n, DType gdt, DType odt, bool with_out, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Case c{std::vector<float>(n),
         std::vector<float>(n),
         std::vector<float>(n),
         std::vector<std::uint8_t>(n * bytes_of(gdt)),
         std::vector<std::uint8_t>(n * bytes_of(odt)),
         gdt,
         odt,
         with_out};
  for (std::size_t j = 0; j < n; ++j) {
    c.p[j] = normal(rng);
    c.m[j] = 0.1f * normal(rng);
    c.v[j] = std::abs(0.01f * normal(rng));
    put(c.g, gdt, j, j % 11 == 0 ? 0.0f : 3.0f * normal(rng));
  }
  return c;
}

AdamWShard shard_of(Case& c, int step) {
  AdamWShard s;
  s.param = BufferView{.data = c.p.data(), .count = c.p.size(), .dtype = DType::kFloat32};
  s.grad = BufferView{.data = c.g.data(), .count = c.p.size(), .dtype = c.gdt};
  s.m = c.m.data();
  s.v = c.v.data();
  if (c.with_out) s.out = BufferView{.data = c.out.data(), .count = c.p.size(), .dtype = c.odt};
  s.options =
      AdamWOptions{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  s.step = step;
  s.grad_scale = 0.5f;
  return s;
}

bool same_bits(const void* a, const void* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;  // (data() of an empty vector may be null)
}

void expect_same(const Case& a, const Case& b, const std::string& what) {
  const std::size_t n = a.p.size();
  EXPECT_TRUE(same_bits(a.p.data(), b.p.data(), 4 * n)) << what << ": parameters";
  EXPECT_TRUE(same_bits(a.m.data(), b.m.data(), 4 * n)) << what << ": first moments";
  EXPECT_TRUE(same_bits(a.v.data(), b.v.data(), 4 * n)) << what << ": second moments";
  EXPECT_TRUE(same_bits(a.out.data(), b.out.data(), a.out.size())) << what << ": output";
}

TEST(CpuAdamW, TheKernelIsTheBestTheCpuCanRun) {
#if defined(__x86_64__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  EXPECT_STREQ(cpu::adamw_kernel(1), avx512 ? "avx512" : avx2 ? "avx2" : "scalar");
  EXPECT_STREQ(cpu::adamw_kernel(16), avx2 ? "avx2" : "scalar");
  EXPECT_EQ(cpu::can_run(cpu::Kernel::kAvx512), avx512);
  EXPECT_EQ(cpu::can_run(cpu::Kernel::kAvx2), avx2);
#else
  EXPECT_STREQ(cpu::adamw_kernel(), "scalar");
#endif
  EXPECT_TRUE(cpu::can_run(cpu::Kernel::kScalar));
  for (cpu::Kernel k : {cpu::Kernel::kAvx2, cpu::Kernel::kAvx512}) {
    if (cpu::can_run(k)) continue;
    Case c = make(4, DType::kFloat32, DType::kFloat32, false, 1);
    EXPECT_THROW(cpu::adamw(shard_of(c, 1), 1, k), Error) << cpu::to_string(k);
  }
}

// The vector kernels this CPU can run (the others are named, not run: a
// CPU without AVX-512 cannot test it).
const std::vector<cpu::Kernel>& runnable_kernels() {
  static const std::vector<cpu::Kernel> kernels = [] {
    std::vector<cpu::Kernel> out;
    for (cpu::Kernel k : {cpu::Kernel::kAvx2, cpu::Kernel::kAvx512}) {
      if (cpu::can_run(k))
        out.push_back(k);
      else
        std::printf("note: this CPU cannot run the %s kernel; it is not tested here\n",
                    cpu::to_string(k));
    }
    return out;
  }();
  return kernels;
}

TEST(CpuAdamW, EveryKernelAndSplitGivesTheScalarLoopsBits) {
  const DType kinds[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  for (DType gdt : kinds) {
    for (DType odt : kinds) {
      for (bool with_out : {false, true}) {
        for (std::size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 1000, 200003}) {
          for (int threads : {1, 3}) {
            for (cpu::Kernel kernel : runnable_kernels()) {
              const std::string what =
                  std::string(cpu::to_string(kernel)) + ", grad " + std::string(to_string(gdt)) +
                  ", out " + (with_out ? std::string(to_string(odt)) : "none") + ", " +
                  std::to_string(n) + " elements, " + std::to_string(threads) + " thread(s)";
              Case want = make(n, gdt, odt, with_out, static_cast<unsigned>(n) + 7);
              Case got = want;
              for (int step = 1; step <= 3; ++step) {
                AdamWShard a = shard_of(want, step);
                cpu::adamw_scalar(a, cpu::adamw_constants(a), 0, n);
                cpu::adamw(shard_of(got, step), threads, kernel);
              }
              expect_same(want, got, what);
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(CpuAdamW, SpecialValuesGiveTheSameBitsToo) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (DType odt : {DType::kBFloat16, DType::kFloat16}) {
    Case want = make(24, DType::kFloat32, odt, true, 3);
    // Gradients that make the parameters infinite or NaN, and parameters that
    // round to the output's extremes (overflow to infinity, subnormals, ties).
    const float grads[] = {inf, -inf, nan, 1e30f, -1e-30f, 0.0f};
    for (int j = 0; j < 6; ++j) put(want.g, DType::kFloat32, j, grads[j]);
    const float params[] = {70000.0f, -65520.0f, 1e-6f, -3e-8f, 1.00390625f, 1.01171875f, 3e38f};
    for (int j = 0; j < 7; ++j) want.p[8 + j] = params[j];
    AdamWShard a = shard_of(want, 1);
    Case before = want;
    cpu::adamw_scalar(a, cpu::adamw_constants(a), 0, 24);
    for (cpu::Kernel kernel : runnable_kernels()) {
      Case got = before;
      cpu::adamw(shard_of(got, 1), 1, kernel);
      expect_same(want, got,
                  std::string(cpu::to_string(kernel)) + ", special values, out " +
                      std::string(to_string(odt)));
    }
  }
}

// Gradients of 1e-20 square into denormals, which the host kernel flushes to
// zero (x86 runs them a hundred times slower): the moments may differ below
// 1.2e-38, the parameters by no more than rounding, since eps hides them.
TEST(CpuAdamW, DenormalsFlushedChangeNothingThatEpsDoesNotHide) {
  const std::size_t n = 1000;
  Case want = make(n, DType::kFloat32, DType::kFloat32, false, 5);
  for (std::size_t j = 0; j < n; ++j) {
    put(want.g, DType::kFloat32, j, (j % 2 ? 1e-20f : -3e-21f));
    want.m[j] = want.v[j] = 0.0f;  // a first step: the moments are the gradients'
  }
  Case got = want;
  for (int step = 1; step <= 3; ++step) {
    AdamWShard a = shard_of(want, step);
    cpu::adamw_scalar(a, cpu::adamw_constants(a), 0, n);
    cpu::adamw(shard_of(got, step), 2);
  }
  ASSERT_TRUE(std::fpclassify(want.v[1]) == FP_SUBNORMAL) << "the test must make denormals";
  for (std::size_t j = 0; j < n; ++j) {
    EXPECT_NEAR(got.v[j], want.v[j], 1.2e-38f) << j;
    EXPECT_EQ(got.m[j], want.m[j]) << j;
    EXPECT_NEAR(got.p[j], want.p[j], 1e-7f * std::fabs(want.p[j])) << j;
  }
}

TEST(CpuAdamW, RefusesDeviceBuffers) {
  Case c = make(4, DType::kFloat32, DType::kFloat32, false, 1);
  AdamWShard s = shard_of(c, 1);
  s.param.device = DeviceType::kCuda;
  EXPECT_THROW(cpu::adamw(s, 1), Error);
}

}  // namespace
}  // namespace rtd::shard
