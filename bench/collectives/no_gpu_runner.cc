// Built without CUDA: the GPU modes say so.
#include <stdexcept>

#include "bench/collectives/runner.h"

namespace rtd::bench {

std::unique_ptr<Runner> make_gpu_runner(const std::string& mode, const std::string&, long long) {
  throw std::runtime_error("--mode " + mode + " needs a build with CUDA and NCCL; use --mode gloo");
}

}  // namespace rtd::bench
