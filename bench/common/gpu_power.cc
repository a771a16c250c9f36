// NVML through dlopen: only the five entry points the benchmarks read.
#include "bench/common/gpu_power.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>

namespace rtd::bench {
namespace {

using NvmlDevice = void*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;

}  // namespace

struct GpuPower::Api {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*energy)(NvmlDevice, unsigned long long*) = nullptr;  // millijoules
  int (*limit)(NvmlDevice, unsigned*) = nullptr;             // milliwatts
  int (*clock)(NvmlDevice, int, unsigned*) = nullptr;        // MHz
};

GpuPower::GpuPower(const std::string& pci_bus_id) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    why_ = "libnvidia-ml.so.1 not found (NVML comes with the NVIDIA driver)";
    return;
  }
  api_ = new Api{.lib = lib};
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    return fn != nullptr;
  };
  if (!sym(api_->init, "nvmlInit_v2") || !sym(api_->shutdown, "nvmlShutdown") ||
      !sym(api_->by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !sym(api_->energy, "nvmlDeviceGetTotalEnergyConsumption") ||
      !sym(api_->limit, "nvmlDeviceGetEnforcedPowerLimit") ||
      !sym(api_->clock, "nvmlDeviceGetClockInfo")) {
    why_ = "libnvidia-ml.so.1 lacks an entry point the benchmark reads";
    return;
  }
  if (api_->init() != kNvmlSuccess) {
    why_ = "nvmlInit failed";
    return;
  }
  NvmlDevice device = nullptr;
  if (api_->by_bus_id(pci_bus_id.c_str(), &device) != kNvmlSuccess) {
    why_ = "NVML has no GPU at PCI bus id " + pci_bus_id;
    api_->shutdown();
    return;
  }
  unsigned long long mj = 0;
  if (api_->energy(device, &mj) != kNvmlSuccess) {
    why_ = "this GPU does not report its energy";
    api_->shutdown();
    return;
  }
  device_ = device;
}

GpuPower::~GpuPower() {
  if (sampler_.joinable()) stop_clock_samples();
  if (device_ != nullptr) api_->shutdown();
  if (api_ != nullptr) {
    dlclose(api_->lib);
    delete api_;
  }
}

double GpuPower::joules() const {
  unsigned long long mj = 0;
  if (!available() || api_->energy(device_, &mj) != kNvmlSuccess)
    return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(mj) / 1000.0;
}

double GpuPower::limit_watts() const {
  unsigned mw = 0;
  if (!available() || api_->limit(device_, &mw) != kNvmlSuccess)
    return std::numeric_limits<double>::quiet_NaN();
  return mw / 1000.0;
}

unsigned GpuPower::sm_clock_mhz() const {
  unsigned mhz = 0;
  if (!available() || api_->clock(device_, kNvmlClockSm, &mhz) != kNvmlSuccess) return 0;
  return mhz;
}

void GpuPower::start_clock_samples() {
  if (!available() || sampler_.joinable()) return;
  clock_sum_ = 0;
  clock_count_ = 0;
  sampling_ = true;
  sampler_ = std::thread([this] {
    while (sampling_) {
      if (unsigned mhz = sm_clock_mhz(); mhz != 0) {
        clock_sum_ += mhz;
        ++clock_count_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
}

double GpuPower::stop_clock_samples() {
  if (!sampler_.joinable()) return std::numeric_limits<double>::quiet_NaN();
  sampling_ = false;
  sampler_.join();
  return clock_count_ > 0 ? clock_sum_ / clock_count_ : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace rtd::bench
