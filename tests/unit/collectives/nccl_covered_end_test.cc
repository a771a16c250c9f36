// The NCCL backend's covered ends, with fakes: small calls on the caller's
// stream share one end event (recorded by every kEndCovers-th call), a Work
// that needs its end records it, a pause, another stream or a capture
// records the pending end, and calls left pending are still watched: a call
// that never completes is aborted at its deadline and named. No GPU needed.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/collectives/nccl_with_fakes.h"

namespace rtd::nccl {
namespace {

auto* const kCaller = reinterpret_cast<cudaStream_t>(0x99);
auto* const kOther = reinterpret_cast<cudaStream_t>(0x42);
const std::string kCallerName = testing_util::handle_name(kCaller, 's');
const std::string kOtherName = testing_util::handle_name(kOther, 's');

class CoveredEnds : public NcclWithFakes {
 protected:
  // Inline calls (on the caller's stream). The watchdog records an end only
  // once it stayed pending for a whole poll (a tenth of the timeout, at most
  // 100 ms): with the default timeout, only when a test pauses for it.
  std::unique_ptr<NcclCommunicator> make_inline(
      std::chrono::milliseconds timeout = std::chrono::seconds(20), int size = 1) {
    return make(timeout, NcclSettings{.inline_bytes = 1 << 20}, size);
  }
  std::shared_ptr<Work> call(NcclCommunicator& comm, cudaStream_t stream = kCaller) {
    return base(comm).all_reduce(device_view(4), ReduceOp::kSum, StreamRef{stream});
  }
  int records_on(const std::string& stream) {
    int n = 0;
    for (const std::string& c : log_.calls()) {
      if (c.rfind("event_record ", 0) == 0 && c.size() >= stream.size() &&
          c.compare(c.size() - stream.size(), stream.size(), stream) == 0)
        ++n;
    }
    return n;
  }
  // Waits up to 5 s for pred.
  template <typename Pred>
  bool eventually(Pred pred) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!pred() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred();
  }
};

TEST_F(CoveredEnds, CallsOnTheCallersStreamShareOneEndEvent) {
  auto comm = make_inline();
  log_.clear();
  std::vector<std::shared_ptr<Work>> works;
  for (std::uint32_t i = 0; i + 1 < kEndCovers; ++i) works.push_back(call(*comm));
  EXPECT_EQ(records_on(kCallerName), 0) << "pending: the next calls cover them";
  works.push_back(call(*comm));
  EXPECT_EQ(records_on(kCallerName), 1) << "the kEndCovers-th records the end of them all";
  EXPECT_EQ(comm->in_flight(), 1u);
  for (const auto& work : works) {
    EXPECT_TRUE(work->done());
    work->wait(StreamRef{kCaller});  // ran there: nothing to order
  }
  EXPECT_EQ(log_.count("stream_wait_event"), 0);
  EXPECT_EQ(records_on(kCallerName), 1);
}

TEST_F(CoveredEnds, AWorkThatNeedsItsPendingEndRecordsIt) {
  auto comm = make_inline();
  cuda_->events_complete = false;
  auto first = call(*comm);
  auto second = call(*comm);
  log_.clear();
  EXPECT_FALSE(second->done()) << "recorded now, and not complete";
  ASSERT_EQ(records_on(kCallerName), 1);
  EXPECT_EQ(log_.count("event_query"), 1);
  // Both share that end: the first's query records nothing more.
  EXPECT_FALSE(first->done());
  EXPECT_EQ(records_on(kCallerName), 1);
  // A stream outside waits on it.
  first->wait(StreamRef{kOther});
  EXPECT_EQ(log_.count("stream_wait_event " + kOtherName), 1);
  cuda_->events_complete = true;
  EXPECT_TRUE(first->done());
  EXPECT_TRUE(second->done());
  // A later call starts a new pending end.
  auto third = call(*comm);
  EXPECT_EQ(records_on(kCallerName), 1);
  third->wait(StreamRef{kOther});
  EXPECT_EQ(records_on(kCallerName), 2) << "a wait elsewhere needs the event";
  EXPECT_EQ(log_.count("stream_wait_event " + kOtherName), 2);
}

TEST_F(CoveredEnds, ACallOnAnotherStreamRecordsThePendingEndFirst) {
  auto comm = make_inline();
  call(*comm);
  call(*comm);
  log_.clear();
  call(*comm, kOther);
  EXPECT_EQ(records_on(kCallerName), 1) << "the caller's stream's end, recorded there";
  EXPECT_EQ(records_on(kOtherName), 0) << "the new call's end is pending";
}

TEST_F(CoveredEnds, TheWatchdogRecordsAnEndLeftPendingByAPause) {
  auto comm = make_inline(std::chrono::milliseconds(200));  // polls every 20 ms
  auto work = call(*comm);
  EXPECT_TRUE(eventually([&] { return records_on(kCallerName) == 1; }));
  EXPECT_TRUE(eventually([&] { return comm->in_flight() == 0; })) << "watched, and retired";
  EXPECT_EQ(log_.count("comm_abort"), 0);
}

// The case the watchdog's record is for: the trainer issues a few calls and
// then waits on the host (a loss's .item()), and one of them never completes.
TEST_F(CoveredEnds, ACoveredCallThatNeverCompletesIsAbortedAtItsDeadlineAndNamed) {
  auto comm = make_inline(std::chrono::milliseconds(200), 2);  // rank 1 never reports
  cuda_->events_complete = false;
  call(*comm);  // #1
  call(*comm);  // #2
  call(*comm);  // #3, then the caller waits elsewhere
  EXPECT_TRUE(eventually([&] { return log_.count("comm_abort") == 1; }));
  auto failure = base(*comm).failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->category(), ErrorCategory::kTimeout);
  const std::string what = failure->what();
  EXPECT_NE(what.find("nccl all_reduce #1"), std::string::npos) << what;
  EXPECT_NE(what.find("did not complete within 200 ms"), std::string::npos) << what;
  EXPECT_NE(what.find("no report from rank(s) 1"), std::string::npos) << what;
  cuda_->events_complete = true;
}

// Covered calls complete as their end does: after calls that completed, the
// first that never does is the one named.
TEST_F(CoveredEnds, TheCallNamedIsTheFirstCoveredCallThatNeverCompletes) {
  auto comm = make_inline(std::chrono::milliseconds(200), 2);
  for (std::uint32_t i = 0; i < 2 * kEndCovers; ++i) call(*comm);  // #1..#16: two ends
  EXPECT_TRUE(eventually([&] { return comm->in_flight() == 0; })) << "both retired";
  cuda_->events_complete = false;
  call(*comm);  // #17
  call(*comm);  // #18
  EXPECT_TRUE(eventually([&] { return log_.count("comm_abort") == 1; }));
  auto failure = base(*comm).failure();
  ASSERT_TRUE(failure.has_value());
  const std::string what = failure->what();
  EXPECT_NE(what.find("nccl all_reduce #17 "), std::string::npos) << what;
  EXPECT_NE(what.find("flight recorder for #17 all_reduce"), std::string::npos) << what;
  cuda_->events_complete = true;
}

// Calls covered by an end pending when their stream is captured into a CUDA
// graph were captured, or made just before (the stream takes no record
// outside the capture until it ends). Their end is recorded into the capture
// (a stream of the capture can still be ordered after them), never queried,
// and not watched; their Works are done, as a captured call's are.
TEST_F(CoveredEnds, CallsCoveredByAnEndPendingInACaptureAreSetAside) {
  auto comm = make_inline(std::chrono::milliseconds(200));
  cuda_->events_complete = false;  // were they watched, they would be late
  auto before = call(*comm);
  cuda_->capturing = kCaller;
  auto captured = call(*comm);
  EXPECT_EQ(records_on(kCallerName), 0) << "pending";
  EXPECT_TRUE(captured->done());
  EXPECT_EQ(records_on(kCallerName), 1) << "recorded into the capture";
  EXPECT_TRUE(before->done());
  EXPECT_FALSE(before->error().has_value());
  before->wait(StreamRef{kOther});
  EXPECT_EQ(log_.count("stream_wait_event " + kOtherName), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past every deadline
  EXPECT_EQ(log_.count("comm_abort"), 0);
  EXPECT_EQ(cuda_->broken_captures, 0);
  EXPECT_EQ(log_.count("event_query"), 0);
  EXPECT_EQ(comm->in_flight(), 0u);
  // The capture over, calls are watched again, and the set-aside end goes
  // back into circulation: its Works stay done.
  cuda_->capturing = nullptr;
  cuda_->events_complete = true;
  call(*comm)->wait();
  EXPECT_TRUE(before->done());
  before->wait(StreamRef{kOther});
  EXPECT_EQ(log_.count("stream_wait_event " + kOtherName), 1) << "retired: nothing to order";
  EXPECT_TRUE(eventually([&] { return comm->in_flight() == 0; }));
}

// The legacy and per-thread default streams are not covered: another
// thread's record there would go to its own stream (per-thread) or context.
TEST_F(CoveredEnds, CallsOnADefaultStreamRecordTheirOwnEnds) {
  auto comm = make_inline();
  for (cudaStream_t stream : {cudaStreamPerThread, cudaStreamLegacy}) {
    log_.clear();
    call(*comm, stream);
    call(*comm, stream);
    EXPECT_EQ(records_on(testing_util::handle_name(stream, 's')), 2);
  }
}

// The watchdog leaves an end pending while its stream is captured: a record
// there would join the capture.
TEST_F(CoveredEnds, TheWatchdogRecordsNothingIntoACapture) {
  auto comm = make_inline(std::chrono::milliseconds(200));
  auto work = call(*comm);
  log_.clear();
  cuda_->capturing = kCaller;                                   // begun by another thread, say
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // five polls
  EXPECT_EQ(records_on(kCallerName), 0);
  cuda_->capturing = nullptr;
  EXPECT_TRUE(eventually([&] { return records_on(kCallerName) == 1; }));
  EXPECT_TRUE(work->done());
  EXPECT_EQ(cuda_->broken_captures, 0);
}

// A Work's wait or query from another thread while the caller keeps calling:
// the caller's side is held by one at a time, and every call is covered.
TEST_F(CoveredEnds, WorksAskedFromAnotherThreadWhileTheCallerCalls) {
  auto comm = make_inline();
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 64; ++i) works.push_back(call(*comm));
  std::thread asker([&] {
    for (const auto& work : works) work->wait();
  });
  for (std::uint64_t i = 0; i < 4 * CommState::kQueryEvery * kEndCovers; ++i) call(*comm);
  asker.join();
  call(*comm)->wait();
  EXPECT_TRUE(eventually([&] { return comm->in_flight() == 0; }));
  EXPECT_FALSE(base(*comm).failure().has_value());
}

// A pending end whose record fails, caught by the caller, who calls on: the
// communicator is failed, and every later call is refused (before, each
// covered call appended to the full slot's list of later calls, past it).
TEST_F(CoveredEnds, AFailedRecordFailsTheCommunicatorAndLaterCallsAreRefused) {
  auto comm = make_inline();
  for (std::uint32_t i = 0; i + 1 < kEndCovers; ++i) call(*comm);
  cuda_->records_fail = true;
  EXPECT_THROW(call(*comm), Error) << "the kEndCovers-th records the end, and fails";
  ASSERT_TRUE(base(*comm).failure().has_value());
  EXPECT_NE(std::string(base(*comm).failure()->what()).find("recording its end"), std::string::npos)
      << base(*comm).failure()->what();
  cuda_->records_fail = false;
  for (std::uint32_t i = 0; i < 4 * kEndCovers; ++i) {
    EXPECT_THROW(call(*comm), Error) << "call " << i << " after the failed record";
  }
}

// A call with an end of its own whose record fails: failed alike.
TEST_F(CoveredEnds, AFailedRecordOfACallsOwnEndFailsTheCommunicator) {
  auto comm = make(std::chrono::seconds(5));  // calls on its stream, each with its own end
  cuda_->records_before_failure = 1;          // the record that orders it after the caller's
  EXPECT_THROW(base(*comm).all_reduce(device_view(4), ReduceOp::kSum, StreamRef{kCaller}), Error);
  EXPECT_EQ(cuda_->records_before_failure, 0) << "the end's record failed";
  cuda_->records_before_failure = -1;
  EXPECT_TRUE(base(*comm).failure().has_value());
  EXPECT_THROW(base(*comm).all_reduce(device_view(4), ReduceOp::kSum, StreamRef{kCaller}), Error);
}

}  // namespace
}  // namespace rtd::nccl
