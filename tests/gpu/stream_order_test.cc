// [Stream order] on a real GPU: a collective waits for the caller's stream,
// and Work::wait(stream) orders another stream without blocking the host; a
// small one, which runs on the caller's stream, is done only once it ran,
// also when called from a thread that never used CUDA before.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "collectives/nccl/nccl_communicator.h"
#include "tests/gpu/spin_kernel.h"
#include "tests/multiproc/world.h"

namespace rtd::testing_util {
namespace {

class StreamOrder : public WorldTest {};

TEST_F(StreamOrder, WaitOnAStreamDoesNotBlockTheHostAndOrdersTheStream) {
  cudaStream_t caller = nullptr, other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  Placed buf(DType::kFloat32, 1 << 20);
  for (std::size_t i = 0; i < buf.host.count; ++i) buf.host.set(i, 1.0);
  buf.push();
  // The first call of a size sets NCCL's path up, which can take the host
  // longer than the spin below: made here, outside what is checked.
  comm().all_reduce(buf.view(), ReduceOp::kSum, StreamRef{caller})->wait();
  buf.push();

  // About a second of GPU time on the caller's stream, ahead of the collective.
  launch_spin(caller, 2'000'000'000LL);
  auto work = comm().all_reduce(buf.view(), ReduceOp::kSum, StreamRef{caller});
  EXPECT_FALSE(work->done()) << "the collective must wait for the caller's stream";
  work->wait(StreamRef{other});
  EXPECT_FALSE(work->done()) << "wait(stream) returned only after the collective finished";

  cudaEvent_t after = nullptr;
  ASSERT_EQ(cudaEventCreate(&after), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(after, other), cudaSuccess);
  // Poll with a deadline rather than cudaEventSynchronize, so that a bug here
  // fails the test instead of hanging it.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  cudaError_t state;
  while ((state = cudaEventQuery(after)) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(state, cudaSuccess) << "the other stream did not finish within 60 s";
  EXPECT_TRUE(work->done()) << "the other stream ran ahead of the collective";
  work->wait();
  buf.pull();
  EXPECT_EQ(buf.host.get(12345), static_cast<double>(comm().size()));
  cudaEventDestroy(after);
  cudaStreamDestroy(caller);
  cudaStreamDestroy(other);
}

// A call of at most RTD_NCCL_INLINE_BYTES runs on the caller's stream, its
// end event recorded there through the driver (the runtime's record where
// the driver refuses, as on a thread with no current context).
TEST_F(StreamOrder, SmallCallFromAFreshThreadIsDoneOnlyAfterItRan) {
  cudaStream_t caller = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  Placed buf(DType::kFloat32, 1024);
  for (std::size_t i = 0; i < buf.host.count; ++i) buf.host.set(i, 2.0);
  buf.push();
  launch_spin(caller, 1'000'000'000LL);  // about half a second ahead of it
  std::shared_ptr<Work> work;
  bool done_at_once = true;
  std::thread fresh([&] {
    work = comm().all_reduce(buf.view(), ReduceOp::kSum, StreamRef{caller});
    done_at_once = work->done();
  });
  fresh.join();
  EXPECT_FALSE(done_at_once) << "the end event fired before the spin ahead of the call";
  work->wait();
  EXPECT_TRUE(work->done());
  buf.pull();
  EXPECT_EQ(buf.host.get(0), 2.0 * comm().size());
  EXPECT_EQ(buf.host.get(1023), 2.0 * comm().size());
  cudaStreamDestroy(caller);
}

// Which other GPUs' primary contexts this process holds (the driver's
// cuDevicePrimaryCtxGetState, found through the runtime).
std::vector<bool> other_contexts_active() {
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  int devices = 0, mine = 0;
  cudaGetDeviceCount(&devices);
  cudaGetDevice(&mine);
  std::vector<bool> active(devices, false);
  if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    ADD_FAILURE() << "the driver has no cuDevicePrimaryCtxGetState";
    return active;
  }
  for (int d = 0; d < devices; ++d) {
    unsigned int flags = 0;
    int on = 0;
    if (d != mine && reinterpret_cast<GetState>(fn)(d, &flags, &on) == CUDA_SUCCESS)
      active[d] = on != 0;
  }
  return active;
}

// Small calls on the caller's stream share an end event (covered ends); the
// last few before a pause are left pending until the watchdog's thread, a
// thread that never chose a device, records their end a poll or two later.
// It records in the stream's own context: no context opens on another GPU
// (the runtime's record would open device 0's), and the end it recorded is
// watched (in flight behind a spin, then retired).
TEST_F(StreamOrder, CallsLeftPendingAreRecordedFromTheWatchdogsThread) {
  auto* nccl = dynamic_cast<nccl::NcclCommunicator*>(&comm());
  ASSERT_NE(nccl, nullptr);
  if (nccl->inline_bytes() < 1024)
    GTEST_SKIP() << "calls run on the communicator's stream (RTD_NCCL_INLINE_BYTES="
                 << nccl->inline_bytes() << "): none is covered";
  cudaStream_t caller = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  Placed buf(DType::kFloat32, 256);
  for (std::size_t i = 0; i < buf.host.count; ++i) buf.host.set(i, 1.0);
  buf.push();
  comm().all_reduce(buf.view(), ReduceOp::kSum, StreamRef{caller})->wait();
  ASSERT_EQ(cudaStreamSynchronize(caller), cudaSuccess);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (nccl->in_flight() != 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(nccl->in_flight(), 0u);
  const std::vector<bool> before = other_contexts_active();

  launch_spin(caller, 2'000'000'000LL);  // about a second ahead of the calls
  for (std::uint32_t i = 0; i + 1 < nccl::kEndCovers; ++i)
    comm().all_reduce(buf.view(), ReduceOp::kSum, StreamRef{caller});  // Works dropped
  EXPECT_EQ(nccl->in_flight(), 0u) << "their end is pending";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // polls every 100 ms at most
  EXPECT_GE(nccl->in_flight(), 1u) << "the watchdog recorded their end: in flight behind the spin";
  const std::vector<bool> after = other_contexts_active();
  for (std::size_t d = 0; d < after.size(); ++d) {
    EXPECT_FALSE(after[d] && !before[d]) << "a context opened on GPU " << d;
  }
  ASSERT_EQ(cudaStreamSynchronize(caller), cudaSuccess);
  const auto retired = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (nccl->in_flight() != 0 && std::chrono::steady_clock::now() < retired)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(nccl->in_flight(), 0u) << "retired once complete";
  EXPECT_FALSE(comm().failure().has_value());
  buf.pull();
  EXPECT_EQ(buf.host.get(0), std::pow(static_cast<double>(comm().size()), nccl::kEndCovers));
  cudaStreamDestroy(caller);
}

// A step captured into a CUDA graph, as torch.cuda.graph captures (global
// mode): more calls than the in-flight list's query period, each ordered back
// onto the capturing stream; the graph replays with the right sums, the
// captured calls' Works neither wait nor fail, and the communicator stays
// healthy for eager calls after a few of the watchdog's polls.
TEST_F(StreamOrder, CallsCapturedIntoAGraphReplayAndLeaveTheCommunicatorHealthy) {
  cudaStream_t caller = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  const std::size_t count = 1024;
  Placed in(DType::kFloat32, count), out(DType::kFloat32, count);
  for (std::size_t i = 0; i < count; ++i) in.host.set(i, comm().rank() + 1.0);
  in.push();
  // A first eager call sets NCCL up for this size outside the capture.
  comm().all_reduce(in.view(), out.view(), ReduceOp::kSum, StreamRef{caller})->wait();
  ASSERT_EQ(cudaStreamSynchronize(caller), cudaSuccess);

  const int calls = 100;
  std::vector<std::shared_ptr<Work>> works;
  ASSERT_EQ(cudaStreamBeginCapture(caller, cudaStreamCaptureModeGlobal), cudaSuccess);
  for (int i = 0; i < calls; ++i) {
    works.push_back(comm().all_reduce(in.view(), out.view(), ReduceOp::kSum, StreamRef{caller}));
    works.back()->wait(StreamRef{caller});
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(caller, &graph), cudaSuccess) << "the capture was broken";
  for (const auto& work : works) {
    EXPECT_TRUE(work->done()) << "a captured call has nothing to wait for until a replay";
    EXPECT_FALSE(work->error().has_value()) << work->error()->what();
  }
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const double want = comm().size() * (comm().size() + 1) / 2.0;
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(out.view().data, 0, out.host.bytes.size(), caller), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, caller), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(caller), cudaSuccess);
    out.pull();
    EXPECT_EQ(out.host.get(0), want) << "replay " << replay;
    EXPECT_EQ(out.host.get(count - 1), want) << "replay " << replay;
  }
  // The watchdog polls at least every 100 ms: let it poll a few times.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto eager = comm().all_reduce(in.view(), out.view(), ReduceOp::kSum, StreamRef{caller});
  eager->wait();
  EXPECT_FALSE(eager->error().has_value());
  out.pull();
  EXPECT_EQ(out.host.get(7), want);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(caller);
}

}  // namespace
}  // namespace rtd::testing_util
