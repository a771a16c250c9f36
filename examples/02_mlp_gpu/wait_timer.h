// How long the training stream stood still waiting for communication: an
// event recorded on the stream right before each wait point (a gradient's
// reduction, a layer's gather) and one right after; the time between them
// is the stream's idle time, the communication the step did not hide.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

namespace mlp {

class WaitTimer {
 public:
  WaitTimer() = default;
  ~WaitTimer() {
    for (auto& [a, b] : pairs_) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

  void before(cudaStream_t s) {
    if (used_ == pairs_.size()) {
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      pairs_.emplace_back(a, b);
    }
    cudaEventRecord(pairs_[used_].first, s);
  }
  void after(cudaStream_t s) { cudaEventRecord(pairs_[used_++].second, s); }

  // The waits since the last call, in milliseconds; the stream must have
  // passed them (the caller synchronized it).
  float take_ms() {
    float total = 0.0f;
    for (std::size_t i = 0; i < used_; ++i) {
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, pairs_[i].first, pairs_[i].second) == cudaSuccess) total += ms;
    }
    used_ = 0;
    return total;
  }

 private:
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pairs_;
  std::size_t used_ = 0;
};

}  // namespace mlp
