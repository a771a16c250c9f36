// The C interface's host AdamW (rtd_host_adamw_*): the step it documents,
// every tensor checked before any is stepped, and a named error for each
// malformed argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rt_dist/c_api.h"

namespace {

struct Tensor {
  std::vector<float> p, g, m, v;
  explicit Tensor(std::size_t n) : p(n), g(n), m(n, 0.0f), v(n, 0.0f) {
    for (std::size_t j = 0; j < n; ++j) {
      p[j] = std::sin(0.37f * static_cast<float>(j));
      g[j] = std::cos(0.11f * static_cast<float>(j)) - 0.3f;
    }
  }
  rtd_adamw_tensor c(std::int64_t step) {
    return rtd_adamw_tensor{
        p.data(), g.data(), RTD_FLOAT32, m.data(), v.data(), static_cast<std::int64_t>(p.size()),
        step,     1e-2f,    0.9f,        0.99f,    1e-8f,    0.1f,
        1.0f};
  }
};

// The documented formula in double precision.
void reference(Tensor& t, int step, float grad_scale) {
  const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
  for (std::size_t j = 0; j < t.p.size(); ++j) {
    const double g = static_cast<double>(t.g[j]) * grad_scale;
    const double m = b1 * t.m[j] + (1 - b1) * g;
    const double v = b2 * t.v[j] + (1 - b2) * g * g;
    const double x = t.p[j] * (1 - lr * wd) - lr * (m / (1 - std::pow(b1, step))) /
                                                  (std::sqrt(v / (1 - std::pow(b2, step))) + eps);
    t.m[j] = static_cast<float>(m);
    t.v[j] = static_cast<float>(v);
    t.p[j] = static_cast<float>(x);
  }
}

TEST(CApiHostAdamW, StepsAsDocumentedOnATeam) {
  rtd_host_adamw* opt = rtd_host_adamw_create(3);
  ASSERT_NE(opt, nullptr) << rtd_last_error();
  EXPECT_NE(std::string(rtd_host_adamw_kernel(opt)), "");
  Tensor big(300000), small(5), want_big(300000), want_small(5);
  for (int step = 1; step <= 3; ++step) {
    rtd_adamw_tensor ts[] = {big.c(step), small.c(step)};
    ts[1].grad_scale = -1.0f;  // maximize
    ASSERT_EQ(rtd_host_adamw_step(opt, ts, 2), 0) << rtd_last_error();
    reference(want_big, step, 1.0f);
    reference(want_small, step, -1.0f);
  }
  for (std::size_t j = 0; j < big.p.size(); j += 997) {
    EXPECT_NEAR(big.p[j], want_big.p[j], 1e-5f) << j;
    EXPECT_NEAR(big.v[j], want_big.v[j], 1e-6f) << j;
  }
  for (std::size_t j = 0; j < small.p.size(); ++j) EXPECT_NEAR(small.p[j], want_small.p[j], 1e-5f);
  rtd_host_adamw_destroy(opt);
}

TEST(CApiHostAdamW, AMalformedTensorIsNamedAndNothingIsStepped) {
  rtd_host_adamw* opt = rtd_host_adamw_create(1);
  ASSERT_NE(opt, nullptr);
  Tensor a(8), b(8);
  const std::vector<float> before = a.p;
  struct Case {
    const char* words;
    void (*spoil)(rtd_adamw_tensor&);
  };
  const Case cases[] = {
      {"count -1", [](rtd_adamw_tensor& t) { t.count = -1; }},
      {"dtype 5", [](rtd_adamw_tensor& t) { t.grad_dtype = RTD_FLOAT16; }},
      {"null pointer", [](rtd_adamw_tensor& t) { t.exp_avg = nullptr; }},
      {"step 0", [](rtd_adamw_tensor& t) { t.step = 0; }},
      {"not finite", [](rtd_adamw_tensor& t) { t.lr = NAN; }},
      {"must not be negative", [](rtd_adamw_tensor& t) { t.eps = -1; }},
      {"[0, 1)", [](rtd_adamw_tensor& t) { t.beta2 = 1.0f; }},
  };
  for (const Case& c : cases) {
    rtd_adamw_tensor ts[] = {a.c(1), b.c(1)};
    c.spoil(ts[1]);
    EXPECT_NE(rtd_host_adamw_step(opt, ts, 2), 0) << c.words;
    const std::string error = rtd_last_error();
    EXPECT_NE(error.find("tensor 1"), std::string::npos) << error;
    EXPECT_NE(error.find(c.words), std::string::npos) << error;
    EXPECT_EQ(rtd_last_error_category(), 1) << error;  // invalid argument
    EXPECT_EQ(a.p, before) << "tensor 0 was stepped before tensor 1 was refused";
  }
  EXPECT_NE(rtd_host_adamw_step(opt, nullptr, 1), 0);
  EXPECT_NE(rtd_host_adamw_step(nullptr, nullptr, 0), 0);
  EXPECT_EQ(rtd_host_adamw_step(opt, nullptr, 0), 0);
  rtd_host_adamw_destroy(opt);
  EXPECT_EQ(rtd_host_adamw_create(0), nullptr);
  EXPECT_NE(std::string(rtd_last_error()).find("threads 0"), std::string::npos);
  rtd_host_adamw_destroy(nullptr);
}

}  // namespace
