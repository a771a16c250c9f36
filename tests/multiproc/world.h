// The world every collective test runs in: the context rtd::init() made (null
// when the tests must skip), the memory buffers live in, and a test fixture
// that skips with the reason when there is no world.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "rt_dist/rt_dist.h"
#include "tests/testing/memory.h"
#include "tests/testing/values.h"

namespace rtd::testing_util {

Context* test_context();
Memory& test_memory();
const std::string& skip_reason();

class WorldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test_context() == nullptr) GTEST_SKIP() << skip_reason();
  }
  Communicator& comm() { return test_context()->comm(); }
};

template <typename Param>
class WorldTestP : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (test_context() == nullptr) GTEST_SKIP() << skip_reason();
  }
  Communicator& comm() { return test_context()->comm(); }
};

// Test values on the host and a copy where the backend wants them.
class Placed {
 public:
  Placed(DType dtype, std::size_t count)
      : host(dtype, count), ptr_(test_memory().alloc(host.bytes.size())) {}
  ~Placed() { test_memory().release(ptr_); }
  Placed(const Placed&) = delete;
  Placed& operator=(const Placed&) = delete;

  // Elements [first, first + count) of the placed copy.
  BufferView view(std::size_t first = 0, std::size_t count = SIZE_MAX) {
    if (count == SIZE_MAX) count = host.count - first;
    return BufferView{.data = static_cast<char*>(ptr_) + first * dtype_size(host.dtype),
                      .count = count,
                      .dtype = host.dtype,
                      .device = test_memory().device(),
                      .device_index = test_memory().device() == DeviceType::kCuda
                                          ? test_context()->local_rank()
                                          : 0};
  }
  void push() { test_memory().to_device(ptr_, host.bytes.data(), host.bytes.size()); }
  void pull() { test_memory().to_host(host.bytes.data(), ptr_, host.bytes.size()); }

  Buffer host;

 private:
  void* ptr_;
};

}  // namespace rtd::testing_util
