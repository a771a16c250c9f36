// The NCCL backend and CUDA graphs, with fakes: calls a stream captures are
// neither queried nor watched, a capture that forked into the communicator's
// stream joins back through the end event, a group is captured with its
// calls, and the communicator's queries leave another thread's capture
// alone. No GPU needed.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/collectives/nccl_with_fakes.h"

namespace rtd::nccl {
namespace {

// [Capture] Calls a stream captures into a CUDA graph run when the graph is
// launched: their Works are done at once with no error, their end events are
// never queried (that breaks the capture) nor watched (nothing runs now, so
// nothing can be late), and a stream outside the capture can still be
// ordered after them.
TEST_F(NcclWithFakes, CallsOnACapturingStreamAreNeitherQueriedNorWatched) {
  auto comm = make(std::chrono::milliseconds(200), NcclSettings{.inline_bytes = 1 << 20});
  auto caller = reinterpret_cast<cudaStream_t>(0x99);
  auto other = reinterpret_cast<cudaStream_t>(0x42);
  cuda_->capturing = caller;
  cuda_->events_complete = false;  // were they watched, they would be late
  std::vector<std::shared_ptr<Work>> works;
  for (std::uint64_t i = 0; i < 3 * CommState::kQueryEvery; ++i)
    works.push_back(base(*comm).all_reduce(device_view(4), ReduceOp::kSum, StreamRef{caller}));
  EXPECT_EQ(comm->in_flight(), 0u);
  const int waits = log_.count("stream_wait_event");
  works[0]->wait(StreamRef{caller});
  EXPECT_EQ(log_.count("stream_wait_event"), waits) << "it ran on that stream: already after it";
  works[0]->wait(StreamRef{other});
  EXPECT_EQ(log_.count("stream_wait_event"), waits + 1);
  for (const auto& work : works) {
    EXPECT_TRUE(work->done());
    EXPECT_FALSE(work->error().has_value());
    work->wait();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past every deadline
  EXPECT_EQ(log_.count("comm_abort"), 0);
  EXPECT_EQ(log_.count("event_query"), 0);
  EXPECT_EQ(cuda_->broken_captures, 0);
  // The capture over, a call is watched again.
  cuda_->capturing = nullptr;
  cuda_->events_complete = true;
  base(*comm).all_reduce(device_view(4), ReduceOp::kSum, StreamRef{caller})->wait();
  works.clear();  // their end slots go back
  EXPECT_FALSE(base(*comm).failure().has_value());
}

// On the communicator's stream (settings.inline_bytes = 0) the capture forks
// into it and must join back: the end event is recorded there, and the
// caller's stream is ordered after it by Work::wait(stream).
TEST_F(NcclWithFakes, ACapturedCallOnTheCommunicatorsStreamJoinsBackThroughItsEndEvent) {
  auto comm = make(std::chrono::milliseconds(200), NcclSettings{.inline_bytes = 0});
  const std::string comm_stream = testing_util::handle_name(comm->stream().cuda_stream, 's');
  auto caller = reinterpret_cast<cudaStream_t>(0x99);
  cuda_->capturing = caller;
  log_.clear();
  auto work = base(*comm).all_reduce(device_view(4), ReduceOp::kSum, StreamRef{caller});
  auto calls = log_.calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().rfind("event_record", 0), 0u) << "the end event is recorded last";
  EXPECT_NE(calls.back().find(comm_stream), std::string::npos) << calls.back();
  const std::string end_event = calls.back().substr(13, calls.back().find(' ', 13) - 13);
  work->wait(StreamRef{caller});
  EXPECT_EQ(log_.calls().back(), "stream_wait_event s153 " + end_event);
  EXPECT_EQ(comm->in_flight(), 0u);
  EXPECT_EQ(log_.count("event_query"), 0);
}

// A group whose calls forked from a captured stream is captured with them.
TEST_F(NcclWithFakes, AGroupCapturedIntoAGraphIsNeitherQueriedNorWatched) {
  auto comm = make(std::chrono::milliseconds(200), {}, 2);
  cuda_->capturing = static_cast<cudaStream_t>(comm->stream().cuda_stream);
  cuda_->events_complete = false;
  auto work = base(*comm).group([&] {
    base(*comm).send(device_view(4), 1, 0);
    base(*comm).recv(device_view(4), 1, 0);
  });
  EXPECT_TRUE(work->done());
  EXPECT_EQ(comm->in_flight(), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(log_.count("comm_abort"), 0);
  EXPECT_EQ(cuda_->broken_captures, 0);
  cuda_->capturing = nullptr;
  cuda_->events_complete = true;
}

// While another thread captures in the global mode, our queries (the
// watchdog's, the caller's every kQueryEvery-th, a Work's) are made in the
// relaxed mode, which leaves that capture alone.
TEST_F(NcclWithFakes, QueriesLeaveAloneACaptureOnAnotherStream) {
  auto comm = make(std::chrono::milliseconds(500));
  cuda_->capturing = reinterpret_cast<cudaStream_t>(0x77);  // someone else's
  std::shared_ptr<Work> last;
  for (std::uint64_t i = 0; i < 2 * CommState::kQueryEvery + 1; ++i)
    last = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  last->wait();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (comm->in_flight() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(log_.count("event_query"), 0);
  EXPECT_EQ(cuda_->broken_captures, 0);
  cuda_->capturing = nullptr;
}

}  // namespace
}  // namespace rtd::nccl
