// Where a test's buffers live: host memory (Gloo) or GPU memory (NCCL). The
// collective tests run on either; values go in and come back through the host.
#pragma once

#include <cstddef>
#include <memory>

#include "rt_dist/types.h"

namespace rtd::testing_util {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual DeviceType device() const = 0;
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual void to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, std::size_t bytes) = 0;
};

std::unique_ptr<Memory> host_memory();
// GPU memory on the current device (only where the tests were built with CUDA).
std::unique_ptr<Memory> cuda_memory();

}  // namespace rtd::testing_util
