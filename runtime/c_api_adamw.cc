// The C interface's host AdamW (rt_dist/c_api.h): rtd::shard::cpu::adamw on
// a thread team kept across steps, every tensor checked at the door.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "rt_dist/c_api.h"
#include "runtime/c_api_errors.h"
#include "sharding/cpu_adamw.h"
#include "sharding/thread_team.h"

struct rtd_host_adamw {
  explicit rtd_host_adamw(int threads)
      : team(threads - 1), kernel(rtd::shard::cpu::best_kernel(threads)) {}
  rtd::shard::cpu::ThreadTeam team;
  rtd::shard::cpu::Kernel kernel;
};

namespace {

using rtd::Error;
using rtd::ErrorCategory;
using rtd::c_api::guarded;

constexpr int kMaxThreads = 1024;
constexpr std::int64_t kMaxTensors = std::int64_t{1} << 24;

[[noreturn]] void refuse(std::int64_t i, const std::string& why) {
  throw Error(ErrorCategory::kInvalidArgument,
              "host AdamW: tensor " + std::to_string(i) + ": " + why);
}

void check(const rtd_adamw_tensor& t, std::int64_t i) {
  if (t.count < 0) refuse(i, "count " + std::to_string(t.count) + " is negative");
  if (t.grad_dtype != RTD_FLOAT32 && t.grad_dtype != RTD_BFLOAT16)
    refuse(i, "the gradient's dtype " + std::to_string(t.grad_dtype) +
                  " is neither RTD_FLOAT32 nor RTD_BFLOAT16");
  if (t.count > 0 && (!t.param || !t.grad || !t.exp_avg || !t.exp_avg_sq))
    refuse(i, "a null pointer among param, grad, exp_avg and exp_avg_sq");
  if (t.step < 1 || t.step > INT32_MAX)
    refuse(i, "step " + std::to_string(t.step) + " is not in [1, 2^31)");
  const float values[] = {t.lr, t.beta1, t.beta2, t.eps, t.weight_decay, t.grad_scale};
  for (float v : values) {
    if (!std::isfinite(v)) refuse(i, "a hyperparameter or the gradient scale is not finite");
  }
  if (t.lr < 0 || t.eps < 0 || t.weight_decay < 0)
    refuse(i, "lr, eps and weight_decay must not be negative");
  if (t.beta1 < 0 || t.beta1 >= 1 || t.beta2 < 0 || t.beta2 >= 1)
    refuse(i, "beta1 and beta2 must lie in [0, 1)");
}

rtd::BufferView floats(float* p, std::int64_t n) {
  return rtd::view(p, static_cast<std::size_t>(n));
}

}  // namespace

extern "C" {

rtd_host_adamw* rtd_host_adamw_create(int threads) {
  return guarded<rtd_host_adamw*>(nullptr, [&] {
    if (threads < 1 || threads > kMaxThreads)
      throw Error(ErrorCategory::kInvalidArgument, "host AdamW: threads " +
                                                       std::to_string(threads) + " is not in [1, " +
                                                       std::to_string(kMaxThreads) + "]");
    return new rtd_host_adamw(threads);
  });
}

int rtd_host_adamw_step(rtd_host_adamw* opt, const rtd_adamw_tensor* tensors, int64_t n) {
  return guarded<int>(1, [&] {
    if (!opt) throw Error(ErrorCategory::kInvalidArgument, "host AdamW: the optimizer is NULL");
    if (n < 0 || n > kMaxTensors || (n > 0 && !tensors))
      throw Error(
          ErrorCategory::kInvalidArgument,
          "host AdamW: " + std::to_string(n) + " tensors at " + (tensors ? "an address" : "NULL"));
    for (std::int64_t i = 0; i < n; ++i) check(tensors[i], i);
    for (std::int64_t i = 0; i < n; ++i) {
      const rtd_adamw_tensor& t = tensors[i];
      if (t.count == 0) continue;
      rtd::shard::AdamWShard s;
      s.param = floats(t.param, t.count);
      s.grad = rtd::BufferView{
          const_cast<void*>(t.grad), static_cast<std::size_t>(t.count),
          t.grad_dtype == RTD_FLOAT32 ? rtd::DType::kFloat32 : rtd::DType::kBFloat16};
      s.m = t.exp_avg;
      s.v = t.exp_avg_sq;
      s.options = rtd::AdamWOptions{t.lr, t.beta1, t.beta2, t.eps, t.weight_decay};
      s.step = static_cast<int>(t.step);
      s.grad_scale = t.grad_scale;
      rtd::shard::cpu::adamw(s, opt->team, opt->kernel);
    }
    return 0;
  });
}

const char* rtd_host_adamw_kernel(rtd_host_adamw* opt) {
  return opt ? rtd::shard::cpu::to_string(opt->kernel) : "";
}

void rtd_host_adamw_destroy(rtd_host_adamw* opt) { delete opt; }

}  // extern "C"
