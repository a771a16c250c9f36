// What the step benchmarks (ddp_step, fsdp_step) share: timing steps on the
// trainer's stream with the GPU's energy, the phases of each step by CUDA
// events, device memory in use, and small helpers for flags and JSON.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "bench/common/gpu_power.h"

namespace rtd::bench {

inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

// NaN (no NVML) as JSON's null.
inline std::string json_number(double v) { return std::isnan(v) ? "null" : std::to_string(v); }

inline double device_used_gib() {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return static_cast<double>(total_b - free_b) / (1 << 30);
}

// Events at the phase boundaries of every step on the trainer's stream.
class PhaseEvents {
 public:
  enum Mark { kStart, kForward, kBackward, kEnd, kMarks };
  PhaseEvents(int steps, cudaStream_t s) : s_(s), events_(steps * kMarks) {
    for (auto& e : events_) cudaEventCreate(&e);
  }
  ~PhaseEvents() {
    for (auto& e : events_) cudaEventDestroy(e);
  }
  void mark(int step, Mark m) {  // step is 1-based, as time_steps counts
    cudaEventRecord(events_[(step - 1) * kMarks + m], s_);
  }
  // Mean milliseconds from mark a to mark b over steps [first, last] (after a sync).
  double mean_ms(Mark a, Mark b, int first, int last) const {
    double sum = 0;
    for (int i = first; i <= last; ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, events_[(i - 1) * kMarks + a], events_[(i - 1) * kMarks + b]);
      sum += ms;
    }
    return sum / (last - first + 1);
  }
  template <typename Result>
  void fill(Result& r, int warmup, int steps) const {
    r.forward_ms = mean_ms(kStart, kForward, warmup + 1, warmup + steps);
    r.backward_ms = mean_ms(kForward, kBackward, warmup + 1, warmup + steps);
    r.after_ms = mean_ms(kBackward, kEnd, warmup + 1, warmup + steps);
  }

 private:
  cudaStream_t s_;
  std::vector<cudaEvent_t> events_;
};

// Times `steps` steps after `warmup`, wall clock around a synchronized stream
// (as the anchor does); fills step_ms and the energy readings of r (any struct
// with step_ms, joules, watts and sm_mhz).
template <typename Step, typename Result>
void time_steps(Step&& step, int warmup, int steps, cudaStream_t s, GpuPower& power, Result& r) {
  for (int i = 1; i <= warmup; ++i) step(i);
  cudaStreamSynchronize(s);
  const double j0 = power.joules();
  power.start_clock_samples();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= steps; ++i) step(warmup + i);
  cudaStreamSynchronize(s);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.sm_mhz = power.stop_clock_samples();
  r.step_ms = ms / steps;
  r.joules = (power.joules() - j0) / steps;
  r.watts = r.joules / (r.step_ms / 1000.0);
}

}  // namespace rtd::bench
