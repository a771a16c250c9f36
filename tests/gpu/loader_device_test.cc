// [Loader on the GPU] rtd::data::Loader::next_on_device hands out the same
// batches as next(), through two GPU buffers in turn: a buffer is refilled
// only after the caller's stream is done reading it, and the caller's stream
// waits for each copy, while the host runs ahead.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "rt_dist/data.h"
#include "tests/gpu/spin_kernel.h"
#include "tests/multiproc/world.h"

namespace rtd::testing_util {
namespace {

class LoaderOnDevice : public WorldTest {};

TEST_F(LoaderOnDevice, HandsOutTheHostBatchesInOrderWhileTheStreamLagsBehind) {
  if (test_memory().device() != DeviceType::kCuda) GTEST_SKIP() << "needs a GPU";
  const int rank = test_context()->rank(), world = test_context()->world_size();
  const auto dir =
      std::filesystem::temp_directory_path() / ("rtd_loader_gpu_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::size_t record = 4096;  // bytes
  std::vector<std::string> files;
  for (int f = 0; f < 2; ++f) {
    files.push_back((dir / ("shard_" + std::to_string(f) + ".bin")).string());
    data::write_shard(files.back(), record, 40, [&](std::uint64_t i, unsigned char* out) {
      for (std::size_t b = 0; b < record; ++b)
        out[b] = static_cast<unsigned char>(f * 97 + i * 7 + b);
    });
  }
  data::LoaderOptions o{.files = files,
                        .record_bytes = record,
                        .batch_per_rank = 3,
                        .rank = rank,
                        .world_size = world,
                        .seed = 5};
  data::Loader host(o);
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  o.device_index = device;
  data::Loader gpu(o);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const int steps = 2 * static_cast<int>(host.steps_per_epoch()) + 3;  // across epochs
  const std::size_t bytes = 3 * record;
  unsigned char* back = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&back), steps * bytes), cudaSuccess);
  for (int k = 0; k < steps; ++k) {
    const void* batch = gpu.next_on_device(StreamRef{s});
    // The stream reads the batch only after a while: a loader that refilled
    // the buffer before the stream got there would change what is read back.
    launch_spin(s, 20'000'000LL);
    ASSERT_EQ(cudaMemcpyAsync(back + k * bytes, batch, bytes, cudaMemcpyDeviceToHost, s),
              cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (int k = 0; k < steps; ++k)
    EXPECT_EQ(std::memcmp(back + k * bytes, host.next(), bytes), 0) << "batch " << k;
  EXPECT_EQ(gpu.position(), host.position());
  cudaFreeHost(back);
  cudaStreamDestroy(s);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rtd::testing_util
