// GPU memory for the collective tests; synchronous copies (tests may block).
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "tests/testing/memory.h"

namespace rtd::testing_util {
namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(rc));
}

class CudaMemory : public Memory {
 public:
  DeviceType device() const override { return DeviceType::kCuda; }
  void* alloc(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }
  void release(void* ptr) override { cudaFree(ptr); }
  void to_device(void* dst, const void* src, std::size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
  }
  void to_host(void* dst, const void* src, std::size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host");
  }
};

}  // namespace

std::unique_ptr<Memory> cuda_memory() { return std::make_unique<CudaMemory>(); }

}  // namespace rtd::testing_util
