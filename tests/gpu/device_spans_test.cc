// [GPU spans] DeviceSpans places work on a GPU stream on the trace's host
// clock: a span lasts what CUDA's own events measure around the same work,
// lies within the host's window around it, and is handed over only once the
// work has finished; the destructor hands over what is still pending.
#include "collectives/nccl/device_spans.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "rt_dist/trace.h"
#include "tests/gpu/spin_kernel.h"
#include "tests/multiproc/world.h"

namespace rtd::testing_util {
namespace {

class GpuSpans : public WorldTest {};

struct Placed {
  std::string name, track, detail;
  std::int64_t start_us, end_us;
};

bool wait_for(cudaEvent_t e) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  cudaError_t state;
  while ((state = cudaEventQuery(e)) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state == cudaSuccess;
}

TEST_F(GpuSpans, PlaceStreamWorkOnTheHostClockOnceItHasRun) {
  if (test_memory().device() != DeviceType::kCuda) GTEST_SKIP() << "needs a GPU";
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  std::mutex mu;
  std::vector<Placed> placed;
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return placed.size();
  };
  cudaStream_t s = nullptr;
  cudaEvent_t from = nullptr, to = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&from), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&to), cudaSuccess);
  {
    nccl::DeviceSpans spans(
        device, [&](const std::string& name, const std::string& track, std::int64_t start_us,
                    std::int64_t end_us, const std::string& detail) {
          std::lock_guard<std::mutex> lock(mu);
          placed.push_back({name, track, detail, start_us, end_us});
        });
    const std::int64_t before = trace::now_us();
    launch_spin(s, 200'000'000LL);  // ~0.1 s ahead of the span
    const nccl::DeviceSpans::Mark mark = spans.begin(s);
    ASSERT_EQ(cudaEventRecord(from, s), cudaSuccess);
    launch_spin(s, 40'000'000LL);
    ASSERT_EQ(cudaEventRecord(to, s), cudaSuccess);
    spans.end(mark, s, "spin", "row 1", "40M cycles");
    spans.collect();
    EXPECT_EQ(count(), 0u) << "a span was placed before its work ran";
    ASSERT_TRUE(wait_for(to)) << "the spin did not end within 60 s";
    // The span's own end event follows `to` on the stream by a moment.
    for (int i = 0; i < 1000 && count() == 0; ++i) {
      spans.collect();
      if (count() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::int64_t after = trace::now_us();
    ASSERT_EQ(count(), 1u);
    float ms = 0;
    ASSERT_EQ(cudaEventElapsedTime(&ms, from, to), cudaSuccess);
    const Placed p = placed[0];
    EXPECT_EQ(p.name, "spin");
    EXPECT_EQ(p.track, "row 1");
    EXPECT_EQ(p.detail, "40M cycles");
    EXPECT_NEAR(static_cast<double>(p.end_us - p.start_us), ms * 1000.0, 50.0);
    // It started behind the first spin (~0.1 s after `before`), and ended by `after`.
    EXPECT_GT(p.start_us, before + 20'000);
    EXPECT_LE(p.end_us, after + 200);
    EXPECT_GE(p.end_us, after - static_cast<std::int64_t>(ms * 1000.0));

    const nccl::DeviceSpans::Mark late = spans.begin(s);
    launch_spin(s, 20'000'000LL);
    spans.end(late, s, "pending at the end", "row 2", "");
  }
  ASSERT_EQ(count(), 2u) << "the destructor did not hand over the pending span";
  EXPECT_EQ(placed[1].name, "pending at the end");
  EXPECT_GE(placed[1].start_us, placed[0].end_us);
  cudaEventDestroy(from);
  cudaEventDestroy(to);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace rtd::testing_util
