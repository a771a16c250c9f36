// NcclWithFakes: an NcclCommunicator over FakeNcclApi and FakeCudaApi (one
// call log), for the NCCL backend's unit tests. No GPU needed.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "collectives/nccl/nccl_communicator.h"
#include "tests/testing/fake_nccl.h"

namespace rtd::nccl {

using testing_util::CallLog;
using testing_util::FakeCudaApi;
using testing_util::FakeNcclApi;

class NcclWithFakes : public ::testing::Test {
 protected:
  std::unique_ptr<NcclCommunicator> make(
      std::chrono::milliseconds timeout = std::chrono::seconds(5), NcclSettings settings = {},
      int size = 1) {
    return std::make_unique<NcclCommunicator>(NcclOptions{.store = store_,
                                                          .rank = 0,
                                                          .size = size,
                                                          .device = 1,
                                                          .timeout = timeout,
                                                          .settings = settings,
                                                          .nccl = nccl_,
                                                          .cuda = cuda_});
  }
  // Calls go through the interface, as a trainer's do (its default arguments).
  static Communicator& base(Communicator& c) { return c; }
  BufferView device_view(std::size_t count) {
    return BufferView{reinterpret_cast<void*>(0x7000), count, DType::kFloat32, DeviceType::kCuda};
  }
  // Index of the first call starting with prefix, or -1.
  int index_of(const std::string& prefix) {
    auto calls = log_.calls();
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].rfind(prefix, 0) == 0) return static_cast<int>(i);
    }
    return -1;
  }

  CallLog log_;
  std::shared_ptr<Store> store_ = make_memory_store();
  std::shared_ptr<FakeNcclApi> nccl_ = std::make_shared<FakeNcclApi>(&log_);
  std::shared_ptr<FakeCudaApi> cuda_ = std::make_shared<FakeCudaApi>(&log_);
};

}  // namespace rtd::nccl
