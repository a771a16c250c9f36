#include "launcher/machine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace rtd::launcher {
namespace {

TEST(Machine, CudaVisibleDevicesDecidesWhereSet) {
  EXPECT_EQ(visible_gpus(std::string("0,1,2")), 3);
  EXPECT_EQ(visible_gpus(std::string("GPU-5cb7f26c,GPU-74f13e16")), 2);
  EXPECT_EQ(visible_gpus(std::string("")), 0) << "set but empty: no GPU";
  EXPECT_EQ(visible_gpus(std::string("0,-1,2")), 1) << "CUDA stops at an invalid entry";
}

TEST(Machine, DeviceNodesCountWhereUnset) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "dtrun_fake_dev";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* name : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"})
    std::ofstream(dir / name).flush();
  EXPECT_EQ(visible_gpus(std::nullopt, dir.string()), 2);
  std::filesystem::remove_all(dir);
  EXPECT_GE(usable_cpus(), 1);
}

}  // namespace
}  // namespace rtd::launcher
