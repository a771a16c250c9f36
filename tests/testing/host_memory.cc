#include <cstdlib>
#include <cstring>

#include "tests/testing/memory.h"

namespace rtd::testing_util {
namespace {

class HostMemory : public Memory {
 public:
  DeviceType device() const override { return DeviceType::kCpu; }
  void* alloc(std::size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void release(void* ptr) override { std::free(ptr); }
  // (An empty vector's data() may be null: memcpy of nothing from null is undefined.)
  void to_device(void* dst, const void* src, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
};

}  // namespace

std::unique_ptr<Memory> host_memory() { return std::make_unique<HostMemory>(); }

}  // namespace rtd::testing_util
