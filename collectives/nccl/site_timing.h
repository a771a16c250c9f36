// What choosing a staged site's method by measurement (MethodChoice) needs
// of CUDA: events that time a site's trial calls on a stream, and the
// agreement's sum over the ranks of a few numbers, waited for on the host
// (polling, once per measurement of a site).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "collectives/method_choice.h"

namespace rtd::nccl {

class TrialEvents {
 public:
  explicit TrialEvents(int calls);
  ~TrialEvents();
  TrialEvents(const TrialEvents&) = delete;
  TrialEvents& operator=(const TrialEvents&) = delete;

  void begin(int call, cudaStream_t s);
  void end(int call, cudaStream_t s);
  // The call's milliseconds, waiting for its end; -1 if it was not timed.
  double ms(int call);

 private:
  std::vector<cudaEvent_t> start_, end_;
  std::vector<bool> timed_;
};

// Sums `sums` over the ranks in place: copied to the GPU on stream s,
// all_reduce(device_buffer, s) (an NCCL sum of 4 doubles, in place), copied
// back, and s waited for. Throws Error on a CUDA failure.
class SiteAgreement {
 public:
  explicit SiteAgreement(int device);
  ~SiteAgreement();
  SiteAgreement(const SiteAgreement&) = delete;
  SiteAgreement& operator=(const SiteAgreement&) = delete;

  using AllReduce = std::function<void(double* device_buffer, cudaStream_t s)>;
  void sum(MethodChoice::Sums& sums, cudaStream_t s, const AllReduce& all_reduce);

 private:
  double* device_ = nullptr;
  double* host_ = nullptr;  // pinned
  cudaEvent_t copied_ = nullptr;
};

}  // namespace rtd::nccl
