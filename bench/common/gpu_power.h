// Energy, power limit and SM clock of one GPU, read through NVML (loaded at
// run time, so that the benchmarks build and run where it is missing: every
// reading is then NaN and why() says what failed).
#pragma once

#include <atomic>
#include <string>
#include <thread>

namespace rtd::bench {

class GpuPower {
 public:
  // pci_bus_id as cudaDeviceGetPCIBusId writes it ("0000:19:00.0").
  explicit GpuPower(const std::string& pci_bus_id);
  ~GpuPower();
  GpuPower(const GpuPower&) = delete;
  GpuPower& operator=(const GpuPower&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why() const { return why_; }
  // Energy used since the driver loaded, in joules.
  double joules() const;
  // The power limit the driver enforces, in watts.
  double limit_watts() const;
  unsigned sm_clock_mhz() const;

  // Samples the SM clock every millisecond between start and stop; stop
  // returns the mean in MHz.
  void start_clock_samples();
  double stop_clock_samples();

 private:
  struct Api;
  Api* api_ = nullptr;
  void* device_ = nullptr;
  std::string why_;
  std::thread sampler_;
  std::atomic<bool> sampling_{false};
  double clock_sum_ = 0;
  long clock_count_ = 0;
};

}  // namespace rtd::bench
