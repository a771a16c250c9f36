// GPU and CPU counts for --nproc-per-node=gpu|cpu|auto, without CUDA.
#include "launcher/machine.h"

#include <sched.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <thread>

namespace rtd::launcher {

int visible_gpus(const std::optional<std::string>& cuda_visible_devices,
                 const std::string& dev_dir) {
  if (cuda_visible_devices) {
    std::stringstream list(*cuda_visible_devices);
    std::string entry;
    int n = 0;
    while (std::getline(list, entry, ',')) {
      if (entry.empty() || entry == "-1") break;  // CUDA stops at an invalid entry
      ++n;
    }
    return n;
  }
  int n = 0;
  std::error_code ec;
  const std::regex device("nvidia[0-9]+");
  for (const auto& e : std::filesystem::directory_iterator(dev_dir, ec)) {
    if (std::regex_match(e.path().filename().string(), device)) ++n;
  }
  return n;
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace rtd::launcher
