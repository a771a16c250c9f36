// The NCCL backend's protocol with fakes: nonblocking init polled against a
// deadline, the stream-ordering idiom, host waits that abort on timeout, async
// errors surfacing through Work, groups, and teardown. No GPU needed.
#include "collectives/nccl/nccl_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "collectives/nccl/nccl_bootstrap.h"
#include "tests/unit/collectives/nccl_with_fakes.h"

namespace rtd::nccl {
namespace {

// direct_init = 0: the nonblocking init communicator and the split.
TEST_F(NcclWithFakes, SplitInitIsNonblockingAndPolledUntilReady) {
  nccl_->in_progress_polls = 3;
  auto comm = make(std::chrono::seconds(5), NcclSettings{.max_ctas = 8, .direct_init = 0});
  EXPECT_EQ(log_.count("set_device 1"), 1);
  EXPECT_EQ(log_.count("comm_init rank=0 of 1 blocking=0 maxCTAs=8"), 1);
  EXPECT_GE(log_.count("get_async_error"), 4);
  EXPECT_EQ(log_.count("comm_abort"), 0);
}

TEST_F(NcclWithFakes, SplitInitRunsTheDataPathOnABlockingCommunicatorSplitOffTheInitOne) {
  auto comm = make(std::chrono::seconds(5), NcclSettings{.direct_init = 0});
  EXPECT_EQ(log_.count("comm_split 0 0 blocking=1"), 1);
  EXPECT_LT(index_of("comm_split"), index_of("comm_destroy"))
      << "the init communicator is released";
}

TEST_F(NcclWithFakes, ByDefaultTheBlockingCommunicatorIsMadeDirectlyWithNoSplit) {
  auto comm = make(std::chrono::seconds(5), NcclSettings{.max_ctas = 8});
  EXPECT_EQ(log_.count("comm_init rank=0 of 1 blocking=1 maxCTAs=8"), 1);
  EXPECT_EQ(log_.count("comm_init rank=0 of 1 blocking=0"), 0);
  EXPECT_EQ(log_.count("comm_split"), 0);
  EXPECT_EQ(log_.count("comm_destroy"), 0) << "the one communicator is kept";
  base(*comm).all_reduce(device_view(4), ReduceOp::kSum)->wait();
  EXPECT_EQ(log_.count("all_reduce"), 1);
}

TEST_F(NcclWithFakes, DirectInitThatOutlivesTheDeadlineFailsThenAbortsWhatItMakes) {
  nccl_->blocking_init_ms = 400;  // a peer that comes after the deadline
  const auto start = std::chrono::steady_clock::now();
  try {
    make(std::chrono::milliseconds(100));
    FAIL() << "the init outlived its deadline and the constructor returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("creating the NCCL communicator did not complete within "
                                         "100 ms"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(350))
      << "the caller waited for the init instead of its deadline";
  // The init returns later on its own thread: what it made is aborted, not leaked.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (log_.count("comm_abort") == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(log_.count("comm_init returned"), 1);
  EXPECT_EQ(log_.count("comm_abort"), 1);
}

// A timed-out init names the ranks that never reached NCCL's init (each
// rank marks its arrival in the store), or says that all did.
TEST_F(NcclWithFakes, InitTimeoutNamesTheRanksThatNeverReachedIt) {
  nccl_->blocking_init_ms = 400;
  try {
    make(std::chrono::milliseconds(100), {}, 4);
    FAIL() << "the init outlived its deadline and the constructor returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("rank(s) 1-3 never reached NCCL's init"),
              std::string::npos)
        << e.what();
  }
  for (int r = 1; r < 4; ++r) store_->set("nccl_init/" + std::to_string(r), "1");
  try {
    make(std::chrono::milliseconds(100), {}, 4);
    FAIL() << "the init outlived its deadline and the constructor returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("every rank reached NCCL's init"), std::string::npos)
        << e.what();
  }
  NcclSettings split;
  split.direct_init = 0;  // the split path's init times out alike
  nccl_->never_ready = true;
  store_->set("nccl_init/2", "");  // present: only its absence counts
  try {
    make(std::chrono::milliseconds(100), split, 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("every rank reached NCCL's init"), std::string::npos)
        << e.what();
  }
  nccl_->never_ready = false;
  // The two direct inits return later on their threads and abort what they
  // made (the split path aborted its own at once): wait for them, as they log
  // into this test's fakes.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (log_.count("comm_abort") < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(log_.count("comm_init returned"), 2);
  EXPECT_EQ(log_.count("comm_abort"), 3);
}

TEST_F(NcclWithFakes, NoSplitSharesTheInitCommunicatorsResources) {
  auto comm = make(std::chrono::seconds(5), NcclSettings{.direct_init = 0});
  EXPECT_EQ(log_.count("comm_split"), 1) << "the data-path communicator, split off the init one";
  auto sub = comm->split(0, 0);
  EXPECT_EQ(log_.count("comm_split"), 2);
  for (const std::string& c : log_.calls())
    EXPECT_FALSE(c.rfind("comm_split", 0) == 0 && c.find(" share") != std::string::npos) << c;
}

TEST_F(NcclWithFakes, WorkOutstandingAtAbortFailsEvenIfItsEventFiresLater) {
  auto comm = make();
  auto seen = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  seen->wait();  // observed complete before the abort: stays complete
  cuda_->events_complete = false;
  auto outstanding = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  comm->abort();
  cuda_->events_complete = true;  // e.g. a released wait lets the stream run on
  ASSERT_TRUE(outstanding->error().has_value());
  EXPECT_NE(std::string(outstanding->error()->what()).find("aborted"), std::string::npos);
  EXPECT_FALSE(seen->error().has_value());
}

TEST_F(NcclWithFakes, OperationNobodyWaitsForOnTheHostIsAbortedAtItsDeadline) {
  auto comm = make(std::chrono::milliseconds(200), {}, 2);  // rank 1 of 2 never reports
  cuda_->events_complete = false;  // a peer never joins: the operation never ends
  {
    auto work = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
    work->wait(StreamRef{reinterpret_cast<cudaStream_t>(0x42)});  // a stream wait only
  }  // and the trainer drops the Work, as DDP does
  EXPECT_FALSE(base(*comm).failure().has_value()) << "usable until its deadline";
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (log_.count("comm_abort") == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(log_.count("comm_abort"), 1);
  // What a caller that never waits on the host (the torch backend) asks.
  auto failure = base(*comm).failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->category(), ErrorCategory::kTimeout);
  EXPECT_NE(std::string(failure->what()).find("no report from rank(s) 1"), std::string::npos)
      << failure->what();
  try {
    base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
    FAIL() << "expected the aborted communicator to refuse";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("did not complete within 200 ms"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("nccl all_reduce #1"), std::string::npos) << e.what();
    // The flight recorder's diagnosis.
    EXPECT_NE(std::string(e.what()).find("flight recorder for #1 all_reduce (float32 x 4, sum)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no report from rank(s) 1"), std::string::npos)
        << e.what();
  }
  cuda_->events_complete = true;
}

TEST_F(NcclWithFakes, CompletedOperationsLeaveTheInFlightList) {
  auto comm = make(std::chrono::milliseconds(200));
  for (std::uint64_t i = 0; i < 3 * CommState::kQueryEvery; ++i)
    base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  EXPECT_LE(comm->in_flight(), CommState::kQueryEvery) << "retired as operations are launched";
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past every deadline
  EXPECT_EQ(comm->in_flight(), 0u);
  EXPECT_EQ(log_.count("comm_abort"), 0);
}

// A Work does not share its end event: once the in-flight list has seen the
// operation complete, the event goes on to later operations, and the Work
// knows from the slot's generation that its own operation completed.
TEST_F(NcclWithFakes, AWorkStaysDoneAfterItsEndEventGoesOnToLaterOperations) {
  auto comm = make();
  auto first = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  for (std::uint64_t i = 0; i < 2 * CommState::kQueryEvery; ++i)
    base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  ASSERT_LT(comm->in_flight(), CommState::kQueryEvery) << "the first operation was retired";
  cuda_->events_complete = false;  // every event, the first one's included, now answers "not ready"
  auto later = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  EXPECT_TRUE(first->done());
  EXPECT_FALSE(first->error().has_value());
  EXPECT_FALSE(later->done());
  const int waits = log_.count("stream_wait_event");
  first->wait(StreamRef{reinterpret_cast<cudaStream_t>(0x42)});
  EXPECT_EQ(log_.count("stream_wait_event"), waits) << "nothing to wait for";
  later->wait(StreamRef{reinterpret_cast<cudaStream_t>(0x42)});
  EXPECT_EQ(log_.count("stream_wait_event"), waits + 1);
  cuda_->events_complete = true;
  EXPECT_TRUE(later->done());
}

TEST_F(NcclWithFakes, CtaPolicyReachesEveryCommunicatorInitMakes) {
  const std::string policy = "CTAPolicy=" + std::to_string(NCCL_CTA_POLICY_EFFICIENCY);
  auto has = [&](const std::string& prefix) {
    auto calls = log_.calls();
    return std::any_of(calls.begin(), calls.end(), [&](const std::string& c) {
      return c.rfind(prefix, 0) == 0 && c.find(policy) != std::string::npos;
    });
  };
  auto direct = make(std::chrono::seconds(5), NcclSettings{.cta_policy = "efficiency"});
  EXPECT_TRUE(has("comm_init rank=0 of 1 blocking=1")) << policy;
  log_.clear();
  auto split =
      make(std::chrono::seconds(5), NcclSettings{.cta_policy = "efficiency", .direct_init = 0});
  EXPECT_TRUE(has("comm_init")) << policy;
  EXPECT_TRUE(has("comm_split")) << policy;
}

TEST_F(NcclWithFakes, MinimumBlockCountWithoutAValidMaximumIsAConfigError) {
  for (NcclSettings settings :
       {NcclSettings{.min_ctas = 32}, NcclSettings{.min_ctas = 16, .max_ctas = 8}}) {
    try {
      make(std::chrono::seconds(5), settings);
      ADD_FAILURE() << "expected a configuration error";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kConfig);
      EXPECT_NE(std::string(e.what()).find("RTD_NCCL_MAX_CTAS"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(log_.count("comm_init"), 0) << "refused before NCCL is called";
  auto comm = make(std::chrono::seconds(5), NcclSettings{.min_ctas = 8, .max_ctas = 16});
  EXPECT_EQ(log_.count("comm_init rank"), 1);
}

TEST_F(NcclWithFakes, RegisteredMemoryIsAllocatedRegisteredAndReleasedInOrder) {
  auto comm = make();
  std::shared_ptr<void> mem = base(*comm).allocate_registered(4096);
  ASSERT_NE(mem, nullptr);
  EXPECT_EQ(log_.count("mem_alloc 4096"), 1);
  EXPECT_EQ(log_.count("comm_register 4096"), 1);
  EXPECT_LT(index_of("mem_alloc"), index_of("comm_register"));
  mem.reset();
  EXPECT_EQ(log_.count("comm_deregister"), 1);
  EXPECT_LT(index_of("comm_deregister"), index_of("mem_free"));
}

TEST_F(NcclWithFakes, RegistrationOutlivingTheCommunicatorEndsBeforeItsFinalize) {
  auto comm = make();
  std::shared_ptr<void> mem = comm->allocate_registered(4096);
  comm.reset();
  EXPECT_EQ(log_.count("comm_deregister"), 1);
  EXPECT_LT(index_of("comm_deregister"), index_of("comm_finalize"));
  EXPECT_EQ(log_.count("mem_free"), 0) << "the memory stays valid while referenced";
  mem.reset();
  EXPECT_EQ(log_.count("comm_deregister"), 1) << "not deregistered twice";
  EXPECT_EQ(log_.count("mem_free"), 1);
}

TEST_F(NcclWithFakes, FailedRegistrationFreesTheMemoryAndSaysSo) {
  auto comm = make();
  nccl_->register_result = ncclInvalidUsage;
  try {
    comm->allocate_registered(4096);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kBackend);
    EXPECT_NE(std::string(e.what()).find("ncclCommRegister of 4096 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(log_.count("mem_free"), 1);
}

TEST_F(NcclWithFakes, CallThatNeverReturnsIsAbortedByTheWatchdog) {
  auto comm = make(std::chrono::milliseconds(200));
  nccl_->block_collectives = true;  // e.g. waiting to connect to a peer that never comes
  try {
    base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("did not return within 200 ms"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(log_.count("comm_abort"), 1);
  nccl_->block_collectives = false;
}

TEST_F(NcclWithFakes, SplitInitThatNeverFinishesAbortsAndTimesOut) {
  nccl_->never_ready = true;
  try {
    make(std::chrono::milliseconds(100), NcclSettings{.direct_init = 0});
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("creating the NCCL communicator"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(log_.count("comm_abort"), 1);
}

TEST_F(NcclWithFakes, CollectiveIsOrderedAfterTheCallersStreamOnItsOwnStream) {
  auto comm = make();
  std::string comm_stream = testing_util::handle_name(comm->stream().cuda_stream, 's');
  log_.clear();
  auto caller = reinterpret_cast<cudaStream_t>(0x99);
  auto work = base(*comm).all_reduce(device_view(10), ReduceOp::kSum, StreamRef{caller});
  auto calls = log_.calls();
  int record_start = index_of("event_record");
  int wait = index_of("stream_wait_event " + comm_stream);
  int reduce = index_of("all_reduce 10 " + comm_stream);
  ASSERT_GE(record_start, 0);
  EXPECT_NE(calls[record_start].find(" s153"), std::string::npos)
      << calls[record_start] << " (caller 0x99)";
  EXPECT_LT(record_start, wait);
  EXPECT_LT(wait, reduce);
  EXPECT_EQ(calls.back().rfind("event_record", 0), 0u) << "the end event is recorded last";
  EXPECT_NE(calls.back().find(comm_stream), std::string::npos);
}

// NCCL before 2.29.7 leaves the tail of a one-rank out-of-place average
// unwritten (NVIDIA/nccl#1950); averaging one rank is summing it.
TEST_F(NcclWithFakes, OneRankAverageIsPassedToNcclAsASum) {
  auto comm = make();
  base(*comm).all_reduce(device_view(262147), ReduceOp::kAvg)->wait();
  EXPECT_EQ(nccl_->last_op, ncclSum);
  base(*comm).reduce_scatter(device_view(262147), device_view(262147), ReduceOp::kAvg)->wait();
  EXPECT_EQ(nccl_->last_op, ncclSum);
  base(*comm).all_reduce(device_view(7), ReduceOp::kMax)->wait();
  EXPECT_EQ(nccl_->last_op, ncclMax);
}

TEST_F(NcclWithFakes, TwoRankAverageStaysNcclsAverage) {
  auto comm = make(std::chrono::seconds(5), NcclSettings{}, 2);
  base(*comm).all_reduce(device_view(8), ReduceOp::kAvg)->wait();
  EXPECT_EQ(nccl_->last_op, ncclAvg);
}

TEST_F(NcclWithFakes, WaitOnAStreamEnqueuesADependencyWithoutQueryingOrBlocking) {
  auto comm = make();
  cuda_->events_complete = false;  // the operation never finishes
  auto work = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  log_.clear();
  auto other = reinterpret_cast<cudaStream_t>(0x42);
  work->wait(StreamRef{other});
  auto calls = log_.calls_from_this_thread();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].rfind("stream_wait_event s66 ", 0), 0u) << calls[0];
  cuda_->events_complete = true;
}

TEST_F(NcclWithFakes, HostWaitPastItsDeadlineAbortsTheCommunicatorAndTimesOut) {
  auto comm = make();
  cuda_->events_complete = false;
  auto work = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  EXPECT_FALSE(work->done());
  try {
    work->wait(std::chrono::milliseconds(50));
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("communicator aborted"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("every rank called it alike (0)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(log_.count("comm_abort"), 1);
  EXPECT_TRUE(work->done());
  // Later operations fail at once, naming the abort.
  try {
    base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
    FAIL() << "expected the aborted communicator to refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
  }
  cuda_->events_complete = true;
  comm.reset();
  EXPECT_EQ(log_.count("comm_finalize"), 0) << "an aborted communicator is not finalized";
}

TEST_F(NcclWithFakes, AsyncErrorSurfacesThroughWork) {
  auto comm = make();
  cuda_->events_complete = false;
  auto work = base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  nccl_->async_state = ncclRemoteError;
  EXPECT_TRUE(work->done());
  auto error = work->error();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->category(), ErrorCategory::kBackend);
  EXPECT_NE(std::string(error->what()).find("remote peer went away"), std::string::npos)
      << error->what();
  EXPECT_THROW(work->wait(), Error);
  cuda_->events_complete = true;
  nccl_->async_state = ncclSuccess;
}

// The data path asks NCCL for its asynchronous error on every 16th call
// only: a call NCCL refuses meanwhile names the communicator's failure, and
// once known the failure refuses every later call before NCCL sees it.
TEST_F(NcclWithFakes, CallsAfterAnAsyncErrorAreRefusedNamingIt) {
  auto comm = make();
  base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
  nccl_->async_state = ncclRemoteError;
  nccl_->collective_result = ncclInvalidUsage;  // NCCL's answer on a failed communicator
  try {
    base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
    FAIL() << "expected the failed communicator to refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("communicator of rank 0 failed"), std::string::npos)
        << e.what();
  }
  nccl_->collective_result = ncclSuccess;
  const int calls = log_.count("all_reduce");
  EXPECT_THROW(base(*comm).all_reduce(device_view(4), ReduceOp::kSum), Error);
  EXPECT_EQ(log_.count("all_reduce"), calls) << "a known failure is refused before NCCL";
  nccl_->async_state = ncclSuccess;
}

TEST_F(NcclWithFakes, AnAsyncErrorNcclDoesNotReportIsFoundWithinSixteenCalls) {
  auto comm = make();
  nccl_->async_state = ncclRemoteError;  // NCCL still takes calls (collective_result success)
  int taken = 0;
  for (; taken < 40; ++taken) {
    try {
      base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("remote peer went away"), std::string::npos) << e.what();
      break;
    }
  }
  EXPECT_LT(taken, 16);
  nccl_->async_state = ncclSuccess;
}

// What the torch backend relies on to raise a failure without asking: the
// listener runs once, on the watchdog's thread, when NCCL reports an
// asynchronous error though no call is made, and never while healthy.
TEST_F(NcclWithFakes, AFailureNobodyAsksAboutRunsTheListenerOnce) {
  auto comm = make(std::chrono::milliseconds(200));  // polled every 20 ms
  std::atomic<int> runs{0};
  std::atomic<bool> knew{false};
  std::thread::id on;
  base(*comm).on_failure([&] {
    on = std::this_thread::get_id();
    knew = base(*comm).failure().has_value();  // the listener may ask why
    ++runs;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(runs.load(), 0) << "healthy";
  nccl_->async_state = ncclRemoteError;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (runs.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(knew.load());
  EXPECT_NE(on, std::this_thread::get_id());
  base(*comm).on_failure({});
  nccl_->async_state = ncclSuccess;
}

TEST_F(NcclWithFakes, AListenerSetAfterTheFailureRunsAndOneClearedDoesNot) {
  auto comm = make(std::chrono::milliseconds(200));
  std::atomic<int> first{0}, second{0};
  base(*comm).on_failure([&] { ++first; });
  base(*comm).on_failure({});
  base(*comm).abort();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(first.load(), 0) << "cleared";
  base(*comm).on_failure([&] { ++second; });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (second.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(second.load(), 1);
  base(*comm).on_failure({});
}

TEST_F(NcclWithFakes, FailedCallIsABackendErrorWithNcclsMessage) {
  auto comm = make();
  nccl_->collective_result = ncclInvalidUsage;
  try {
    base(*comm).all_reduce(device_view(4), ReduceOp::kSum);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kBackend);
    EXPECT_NE(std::string(e.what()).find("fake NCCL error"), std::string::npos) << e.what();
  }
  nccl_->collective_result = ncclSuccess;
}

TEST_F(NcclWithFakes, GroupBracketsItsCallsAndReturnsOneWork) {
  auto comm = make(std::chrono::seconds(5), {}, 2);
  log_.clear();
  std::shared_ptr<Work> inner_send, inner_recv;
  auto work = base(*comm).group([&] {
    inner_send = base(*comm).send(device_view(4), 1, 0);
    inner_recv = base(*comm).recv(device_view(4), 1, 0);
  });
  EXPECT_EQ(work, inner_send) << "operations inside a group return the group's Work";
  EXPECT_EQ(work, inner_recv);
  EXPECT_LT(index_of("group_start"), index_of("send 1"));
  EXPECT_LT(index_of("recv 1"), index_of("group_end"));
  EXPECT_EQ(log_.calls().back().rfind("event_record", 0), 0u);
}

TEST_F(NcclWithFakes, HostBuffersAndBadSizesAreRejected) {
  auto comm = make();
  float host[4];
  EXPECT_THROW(base(*comm).all_reduce(view(host, 4), ReduceOp::kSum), Error);
  EXPECT_THROW(base(*comm).all_gather(device_view(4), device_view(5)), Error);
  EXPECT_EQ(log_.count("all_reduce"), 0);
}

TEST_F(NcclWithFakes, TeardownFinalizesThenDestroys) {
  auto comm = make();
  log_.clear();
  comm.reset();
  EXPECT_LT(index_of("comm_finalize"), index_of("comm_destroy"));
  EXPECT_EQ(log_.count("comm_destroy"), 1);
  EXPECT_EQ(log_.count("comm_abort"), 0);
}

TEST_F(NcclWithFakes, SplitWithNoColorJoinsNothing) {
  auto comm = make();
  EXPECT_EQ(base(*comm).split(-1, 0), nullptr);
  EXPECT_EQ(log_.count("comm_split -1 0"), 1);
  auto child = base(*comm).split(3, 0);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->size(), 1);
}

TEST(NcclBootstrap, RankZeroPublishesAndOthersReadTheSameId) {
  CallLog log;
  FakeNcclApi api(&log);
  auto store = make_memory_store();
  ncclUniqueId a = exchange_unique_id(*store, api, {.rank = 0, .timeout = std::chrono::seconds(1)});
  ncclUniqueId b = exchange_unique_id(*store, api, {.rank = 1, .timeout = std::chrono::seconds(1)});
  EXPECT_EQ(std::string(a.internal, sizeof(a.internal)),
            std::string(b.internal, sizeof(b.internal)));
}

TEST(NcclBootstrap, MissingRankZeroIsATimeoutSayingItNeverJoined) {
  CallLog log;
  FakeNcclApi api(&log);
  auto store = make_memory_store();
  try {
    exchange_unique_id(*store, api,
                       {.communicator = "default",
                        .rank = 1,
                        .peer = "rank 0",
                        .timeout = std::chrono::milliseconds(50),
                        .warn_every = std::chrono::milliseconds(20)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("rank 1: rank 0 never joined communicator 'default'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rtd::nccl
