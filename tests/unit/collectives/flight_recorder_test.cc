// The flight recorder: numbering, the ring, the report's text form, and the
// diagnosis it draws from every rank's report.
#include "collectives/flight_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

namespace rtd {
namespace {

using Call = FlightRecorder::Call;
using Report = FlightRecorder::Report;

constexpr std::int64_t kNow = 1'000'000;

Call call(std::uint64_t seq, std::string op, std::string args = "float32 x 16, sum") {
  return Call{.seq = seq, .op = std::move(op), .args = std::move(args), .at_ms = kNow - 2000};
}

TEST(FlightRecorder, NumbersCallsFromOneAndKeepsTheNewestInItsRing) {
  FlightRecorder recorder(nullptr, 0, 1);
  EXPECT_EQ(recorder.record("all_reduce", "a"), 1u);
  EXPECT_EQ(recorder.record("broadcast", "b"), 2u);
  for (std::size_t i = 0; i < FlightRecorder::kCapacity; ++i) recorder.record("barrier", "");
  auto all = recorder.recent(FlightRecorder::kCapacity + 10);
  ASSERT_EQ(all.size(), FlightRecorder::kCapacity);
  EXPECT_EQ(all.front().seq, 3u);
  EXPECT_EQ(all.back().seq, FlightRecorder::kCapacity + 2);
  auto last = recorder.recent(1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].op, "barrier");
}

// The data path records plain fields; they read back as the same text the
// text form stores, and a slot reused by the other form keeps nothing of the
// call it held before.
TEST(FlightRecorder, PlainCallsReadBackAsTheTextPeersCompare) {
  FlightRecorder recorder(nullptr, 0, 1);
  const BufferView buf{.count = 16, .dtype = DType::kBFloat16};
  auto reduce = describe::all_reduce(buf, ReduceOp::kMax);
  auto bcast = describe::broadcast(buf, 3);
  auto bar = describe::barrier();
  recorder.record(reduce.op, reduce.args);
  recorder.record(bcast.op, bcast.args);
  recorder.record(bar.op, bar.args);
  auto calls = recorder.recent(3);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].op, "all_reduce");
  EXPECT_EQ(calls[0].args, call_args(buf, "max"));
  EXPECT_EQ(calls[1].args, "bfloat16 x 16, root 3");
  EXPECT_EQ(calls[2].op, "barrier");
  EXPECT_EQ(calls[2].args, "");
  EXPECT_FALSE(calls[0].done);
  EXPECT_GT(calls[0].at_ms, 0);

  // Around the ring twice, alternating the forms slot by slot.
  for (std::size_t i = 0; i < 2 * FlightRecorder::kCapacity; ++i) {
    if (i % 2 == 0) {
      recorder.record("text_op", "text args");
    } else {
      recorder.record(reduce.op, reduce.args);
    }
  }
  auto all = recorder.recent(FlightRecorder::kCapacity);
  ASSERT_EQ(all.size(), FlightRecorder::kCapacity);
  EXPECT_EQ(all.back().seq, 2 * FlightRecorder::kCapacity + 3);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].seq, all.front().seq + i);
    const bool text = (all[i].seq - 4) % 2 == 0;
    EXPECT_EQ(all[i].op, text ? "text_op" : "all_reduce") << all[i].seq;
    EXPECT_EQ(all[i].args, text ? "text args" : "bfloat16 x 16, max") << all[i].seq;
  }
  recorder.completed(all.back().seq);
  EXPECT_TRUE(recorder.recent(1)[0].done);
  recorder.completed(1);  // long gone from the ring: nothing to mark
}

// The caller records plain calls without the lock while another thread reads
// the ring and marks calls done: a call is read whole or not at all (its
// arguments are its own), and marking a call done never marks the call that
// took its entry later.
TEST(FlightRecorder, ReadersAndTheLockFreeWriterNeverMixCalls) {
  FlightRecorder recorder(nullptr, 0, 1);
  constexpr std::uint64_t kCalls = 20 * FlightRecorder::kCapacity;
  std::atomic<bool> writing{true};
  std::atomic<std::uint64_t> torn{0};
  std::thread reader([&] {
    std::uint64_t last_seen = 0;
    while (writing.load()) {
      for (const Call& c : recorder.recent(FlightRecorder::kCapacity)) {
        // seq s was recorded as count s, even seqs as all_reduce, odd as broadcast.
        const bool even = c.seq % 2 == 0;
        const std::string args = even ? "float32 x " + std::to_string(c.seq) + ", sum"
                                      : "float32 x " + std::to_string(c.seq) + ", root 1";
        if (c.op != (even ? "all_reduce" : "broadcast") || c.args != args) ++torn;
        if (even && c.seq > last_seen) recorder.completed(c.seq);  // even calls only
        last_seen = std::max(last_seen, c.seq);
      }
    }
  });
  for (std::uint64_t seq = 1; seq <= kCalls; ++seq) {
    const BufferView buf{.count = seq};
    const CallDescription d =
        seq % 2 == 0 ? describe::all_reduce(buf, ReduceOp::kSum) : describe::broadcast(buf, 1);
    ASSERT_EQ(recorder.record(d.op, d.args), seq);
  }
  writing = false;
  reader.join();
  EXPECT_EQ(torn.load(), 0u) << "a call read with another call's fields";
  auto all = recorder.recent(FlightRecorder::kCapacity);
  ASSERT_EQ(all.size(), FlightRecorder::kCapacity);
  for (const Call& c : all) {
    if (c.seq % 2 == 1) {
      EXPECT_FALSE(c.done) << "#" << c.seq << " was never completed";
    }
  }
}

TEST(FlightRecorder, ReportsSurviveTheirTextForm) {
  Report report{.published_ms = 42, .calls = {call(7, "all_reduce"), call(8, "barrier", "")}};
  auto back = FlightRecorder::decode(FlightRecorder::encode(report));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->published_ms, 42);
  ASSERT_EQ(back->calls.size(), 2u);
  EXPECT_EQ(back->calls[0].seq, 7u);
  EXPECT_EQ(back->calls[0].args, "float32 x 16, sum");
  EXPECT_EQ(back->calls[1].op, "barrier");
  EXPECT_EQ(back->calls[1].args, "");
  EXPECT_FALSE(FlightRecorder::decode("garbage").has_value());
  EXPECT_FALSE(FlightRecorder::decode("published\t1\n7\tx\tall_reduce\t\n").has_value());
}

TEST(FlightRecorder, NamesTheRankThatHasNotCalledIt) {
  std::vector<std::optional<Report>> reports(3);
  reports[1] = Report{.published_ms = kNow - 500, .calls = {call(4, "all_reduce")}};
  reports[2] = Report{.published_ms = kNow, .calls = {call(4, "all_reduce"), call(5, "broadcast")}};
  std::string why = FlightRecorder::compare(0, call(5, "broadcast"), reports, kNow);
  EXPECT_NE(why.find("rank 1 has not called it; its last was #4 all_reduce (float32 x 16, sum)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("called alike by rank(s) 0, 2"), std::string::npos) << why;
  EXPECT_EQ(why.find("disagree"), std::string::npos) << why;
}

TEST(FlightRecorder, NamesTheRankThatCalledSomethingElse) {
  std::vector<std::optional<Report>> reports(2);
  reports[1] =
      Report{.published_ms = kNow, .calls = {call(3, "broadcast", "float32 x 16, root 0")}};
  std::string why = FlightRecorder::compare(0, call(3, "all_reduce"), reports, kNow);
  EXPECT_NE(why.find("rank 1 called #3 broadcast (float32 x 16, root 0) in its place"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("the ranks disagree on the order of collectives"), std::string::npos) << why;
}

TEST(FlightRecorder, ArgumentsMustAgreeToo) {
  std::vector<std::optional<Report>> reports(2);
  reports[1] = Report{.published_ms = kNow, .calls = {call(3, "all_reduce", "float32 x 8, sum")}};
  std::string why = FlightRecorder::compare(0, call(3, "all_reduce"), reports, kNow);
  EXPECT_NE(why.find("rank 1 called #3 all_reduce (float32 x 8, sum) in its place"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("the ranks disagree on the call's sizes, dtype or options"), std::string::npos)
      << why;
}

TEST(FlightRecorder, SaysWhenEveryRankCalledItAlikeOrARankNeverReported) {
  std::vector<std::optional<Report>> reports(4);
  for (int r = 1; r < 3; ++r)
    reports[r] = Report{.published_ms = kNow, .calls = {call(2, "barrier", "")}};
  std::string silent = FlightRecorder::compare(0, call(2, "barrier", ""), reports, kNow);
  EXPECT_NE(silent.find("no report from rank(s) 3"), std::string::npos) << silent;
  reports[3] = Report{.published_ms = kNow, .calls = {call(2, "barrier", "")}};
  std::string alike = FlightRecorder::compare(0, call(2, "barrier", ""), reports, kNow);
  EXPECT_NE(alike.find("every rank called it alike (0-3)"), std::string::npos) << alike;
  reports[2] = Report{.published_ms = kNow};
  std::string none = FlightRecorder::compare(0, call(2, "barrier", ""), reports, kNow);
  EXPECT_NE(none.find("rank 2 has called no collective on this communicator"), std::string::npos)
      << none;
}

TEST(FlightRecorder, DiagnosesFromPeersReportsInTheStore) {
  auto store = make_memory_store();
  FlightRecorder r0(store, 0, 2, std::chrono::hours(1));  // no timed publishing here
  FlightRecorder r1(store, 1, 2, std::chrono::hours(1));
  r0.record("all_reduce", call_args(BufferView{.count = 16, .dtype = DType::kFloat32}, "sum"));
  r1.record("all_reduce", call_args(BufferView{.count = 16, .dtype = DType::kFloat32}, "sum"));
  const std::uint64_t second = r0.record("broadcast", "float32 x 4, root 0");
  r1.publish();
  std::string why = r0.diagnose(second);
  EXPECT_NE(why.find("flight recorder for #2 broadcast (float32 x 4, root 0)"), std::string::npos)
      << why;
  EXPECT_NE(why.find("rank 1 has not called it; its last was #1 all_reduce (float32 x 16, sum)"),
            std::string::npos)
      << why;
  EXPECT_EQ(r0.diagnose(99), "") << "a call this rank never made has nothing to diagnose";
}

// A memory store that hands out a bounded view and counts what goes through it.
class BoundedCountingStore : public Store {
 public:
  explicit BoundedCountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& k, const std::string& v) override {
    ++sets;
    inner_->set(k, v);
  }
  std::string get(const std::string& k, std::chrono::milliseconds t) override {
    return inner_->get(k, t);
  }
  std::optional<std::string> try_get(const std::string& k) override { return inner_->try_get(k); }
  std::int64_t add(const std::string& k, std::int64_t d) override { return inner_->add(k, d); }
  std::string compare_set(const std::string& k, const std::string& e,
                          const std::string& d) override {
    return inner_->compare_set(k, e, d);
  }
  bool remove(const std::string& k) override { return inner_->remove(k); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  std::shared_ptr<Store> bounded(std::chrono::milliseconds limit) override {
    asked_limit = limit;
    view = std::make_shared<BoundedCountingStore>(inner_);
    return view;
  }
  std::chrono::milliseconds asked_limit{0};
  std::shared_ptr<BoundedCountingStore> view;
  std::atomic<int> sets{0};

 private:
  std::shared_ptr<Store> inner_;
};

TEST(FlightRecorder, TalksToTheStoreThroughABoundedView) {
  auto memory = make_memory_store();
  auto store = std::make_shared<BoundedCountingStore>(memory);
  FlightRecorder recorder(store, 0, 1, std::chrono::hours(1),
                          FlightOptions{.store_limit = std::chrono::milliseconds(1234)});
  EXPECT_EQ(store->asked_limit, std::chrono::milliseconds(1234));
  ASSERT_NE(store->view, nullptr);
  EXPECT_EQ(store->view->sets, 1) << "the first report goes through the view";
  EXPECT_EQ(store->sets, 0) << "and not around it";
  recorder.record("barrier", "");
  recorder.publish();
  EXPECT_EQ(store->view->sets, 2);
  EXPECT_EQ(store->sets, 0);
  EXPECT_EQ(FlightOptions{}.store_limit, std::chrono::seconds(5));
}

TEST(FlightRecorder, PublishesOnItsOwnAfterACall) {
  auto store = make_memory_store();
  FlightRecorder recorder(store, 0, 1, std::chrono::milliseconds(10));
  auto first = FlightRecorder::decode(store->get("flight/0", std::chrono::seconds(1)));
  ASSERT_TRUE(first.has_value()) << "an empty report at construction";
  EXPECT_TRUE(first->calls.empty());
  recorder.record("barrier", "");
  std::optional<Report> report;
  for (int i = 0; i < 500 && !(report && !report->calls.empty()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    report = FlightRecorder::decode(*store->try_get("flight/0"));
  }
  ASSERT_TRUE(report.has_value());
  ASSERT_EQ(report->calls.size(), 1u) << "not published within 5 s";
  EXPECT_EQ(report->calls[0].op, "barrier");
}

// The live warning: once per call that waits past warn_after, with the
// diagnosis; never for calls that completed.
TEST(FlightRecorder, WarnsOnceAboutACallStillWaitingAfterWarnAfter) {
  auto store = make_memory_store();
  std::mutex mu;
  std::vector<std::string> warnings;
  FlightRecorder peer(store, 1, 2, std::chrono::hours(1));
  FlightRecorder recorder(store, 0, 2, std::chrono::milliseconds(10),
                          {.hang_warn = std::chrono::milliseconds(100)},
                          [&](const std::string& text) {
                            std::lock_guard<std::mutex> lock(mu);
                            warnings.push_back(text);
                          });
  recorder.completed(recorder.record("all_reduce", "float32 x 4, sum"));  // #1 completes
  const std::uint64_t stuck = recorder.record("barrier", "");             // #2 never does
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return warnings.size();
  };
  for (int i = 0; i < 500 && count() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // no second warning meanwhile
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(stuck, 2u);
  EXPECT_NE(warnings[0].find("rank 0: collective #2 barrier has waited"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("rank 1 has called no collective on this communicator"),
            std::string::npos)
      << warnings[0];
}

TEST(FlightRecorder, NoWarningWhenEveryCallCompletesOrWarningsAreOff) {
  auto store = make_memory_store();
  std::atomic<int> warnings{0};
  auto count = [&](const std::string&) { ++warnings; };
  FlightRecorder done(store, 0, 1, std::chrono::milliseconds(10),
                      {.hang_warn = std::chrono::milliseconds(20)}, count);
  done.completed(done.record("barrier", ""));
  auto other = make_memory_store();
  FlightRecorder off(other, 0, 1, std::chrono::milliseconds(10),
                     {.hang_warn = std::chrono::milliseconds(0)}, count);
  off.record("barrier", "");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(warnings.load(), 0);
}

TEST(FlightRecorder, ACallThatFailsBeforeItsLaunchIsNotLeftWaiting) {
  FlightRecorder recorder(nullptr, 0, 1);
  const std::uint64_t failed = recorder.record("all_reduce", "");
  { UnlaunchedCall guard(&recorder, failed); }  // thrown out of before launch
  const std::uint64_t running = recorder.record("all_reduce", "");
  {
    UnlaunchedCall guard(&recorder, running);
    guard.launched();
  }
  auto calls = recorder.recent(2);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_TRUE(calls[0].done);
  EXPECT_FALSE(calls[1].done) << "a launched call completes when its operation does";
}

TEST(FlightRecorder, LargeWorldsPublishLessOften) {
  EXPECT_EQ(FlightRecorder::publish_interval(8), std::chrono::seconds(1));
  EXPECT_EQ(FlightRecorder::publish_interval(1000), std::chrono::seconds(1));
  EXPECT_EQ(FlightRecorder::publish_interval(8192), std::chrono::milliseconds(8192));
}

TEST(FlightRecorder, ADiagnosisWritesTheWholeRingWhereAsked) {
  const std::string dir = ::testing::TempDir();
  auto store = make_memory_store();
  FlightRecorder peer(store, 1, 2, std::chrono::hours(1));
  FlightRecorder recorder(store, 0, 2, std::chrono::hours(1),
                          {.hang_warn = std::chrono::milliseconds(0), .dump_dir = dir});
  ASSERT_NE(recorder.dump_path().find("/flight-rank0-comm"), std::string::npos)
      << recorder.dump_path();
  EXPECT_EQ(recorder.dump_path().find("//"), std::string::npos) << recorder.dump_path();
  recorder.completed(recorder.record("all_reduce", "float32 x 4, sum"));
  const std::uint64_t stuck = recorder.record("barrier", "");
  recorder.diagnose(stuck);
  std::ifstream in(recorder.dump_path());
  ASSERT_TRUE(in.good()) << "not written: " << recorder.dump_path();
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("rank 1 has called no collective"), std::string::npos) << text;
  EXPECT_NE(text.find("\tdone\tall_reduce\tfloat32 x 4, sum\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\twaiting\tbarrier\t\n"), std::string::npos) << text;
  std::remove(recorder.dump_path().c_str());
}

}  // namespace
}  // namespace rtd
