#include "collectives/nccl/site_timing.h"

#include <chrono>
#include <string>
#include <thread>

#include "rt_dist/error.h"

namespace rtd::nccl {
namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw Error(ErrorCategory::kBackend, std::string("choosing a copy-engine site's method: ") +
                                             what + " failed (" + cudaGetErrorString(rc) + ")");
  }
}

// Waits, polling, for the event's work: an explicit wait, once per
// measurement, that an abort (which ends the work) also ends.
void wait_for(cudaEvent_t event) {
  for (;;) {
    const cudaError_t rc = cudaEventQuery(event);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) check(rc, "cudaEventQuery");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

TrialEvents::TrialEvents(int calls) : start_(calls), end_(calls), timed_(calls, false) {
  for (int i = 0; i < calls; ++i) {
    check(cudaEventCreate(&start_[i]), "cudaEventCreate");
    check(cudaEventCreate(&end_[i]), "cudaEventCreate");
  }
}

TrialEvents::~TrialEvents() {
  for (std::size_t i = 0; i < start_.size(); ++i) {
    if (start_[i] != nullptr) cudaEventDestroy(start_[i]);
    if (end_[i] != nullptr) cudaEventDestroy(end_[i]);
  }
}

void TrialEvents::begin(int call, cudaStream_t s) {
  check(cudaEventRecord(start_.at(call), s), "cudaEventRecord");
  timed_[call] = false;
}

void TrialEvents::end(int call, cudaStream_t s) {
  check(cudaEventRecord(end_.at(call), s), "cudaEventRecord");
  timed_[call] = true;
}

double TrialEvents::ms(int call) {
  if (!timed_.at(call)) return -1;
  wait_for(end_[call]);
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start_[call], end_[call]), "cudaEventElapsedTime");
  return ms;
}

SiteAgreement::SiteAgreement(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaMalloc(reinterpret_cast<void**>(&device_), sizeof(MethodChoice::Sums)), "cudaMalloc");
  check(cudaMallocHost(reinterpret_cast<void**>(&host_), sizeof(MethodChoice::Sums)),
        "cudaMallocHost");
  check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreate");
}

SiteAgreement::~SiteAgreement() {
  if (device_ != nullptr) cudaFree(device_);
  if (host_ != nullptr) cudaFreeHost(host_);
  if (copied_ != nullptr) cudaEventDestroy(copied_);
}

void SiteAgreement::sum(MethodChoice::Sums& sums, cudaStream_t s, const AllReduce& all_reduce) {
  constexpr std::size_t kBytes = sizeof(MethodChoice::Sums);
  for (std::size_t i = 0; i < sums.size(); ++i) host_[i] = sums[i];
  check(cudaMemcpyAsync(device_, host_, kBytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  all_reduce(device_, s);
  check(cudaMemcpyAsync(host_, device_, kBytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  check(cudaEventRecord(copied_, s), "cudaEventRecord");
  wait_for(copied_);
  for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = host_[i];
}

}  // namespace rtd::nccl
