// FlightRecorder: this rank's recent collectives on one communicator, and the
// same of every peer through the store, so that a collective that times out
// can name the ranks that never called it, or called something else in its
// place, instead of only saying that it timed out.
//
// Each rank keeps its last calls in a ring and publishes the newest few to the
// communicator's store: once at construction, then from a background thread
// whenever they changed (at most once per publish interval). Point-to-point
// operations are not recorded: ranks need not agree on them.
//
// Live warning: when the oldest call not yet completed has waited warn_after,
// the publisher thread reports it once, with the diagnosis, while the call
// keeps waiting for its timeout.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rt_dist/store.h"
#include "rt_dist/types.h"
#include "runtime/core/coarse_clock.h"

namespace rtd {

// What a communicator's recorder does beyond recording (RTD_HANG_WARN_S,
// RTD_FLIGHT_DIR).
struct FlightOptions {
  // How long the oldest incomplete call may wait before a warning (0: never).
  std::chrono::milliseconds hang_warn{60'000};
  // Where each diagnosis also writes this rank's whole ring (empty: nowhere).
  std::string dump_dir;
  // Each store call of the recorder (reports, the diagnosis's reads) gives up
  // after this, so that a store that hangs delays neither a timeout's error
  // nor the communicator's destruction by the store's own 60 s.
  std::chrono::milliseconds store_limit{5'000};
};

// What ranks must agree on in a call, as plain data: recording a call copies
// these fields; the text ("float32 x 1024, sum") is spelled out only when a
// report is published or a call diagnosed.
struct CallArgs {
  std::size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;             // a broadcast's root, or -1
  bool has_buffer = false;   // none: a barrier's (no text)
  bool reduces = false;      // op is the call's reduction
  std::string text() const;  // (fields ordered to pack: 24 bytes)
};

class FlightRecorder {
 public:
  struct Call {
    std::uint64_t seq = 0;   // 1-based, in call order on this communicator
    std::string op;          // "all_reduce"
    std::string args;        // "float32 x 1024, sum": what ranks must agree on
    std::int64_t at_ms = 0;  // when it was called (milliseconds since the Unix epoch)
    bool done = false;       // completed or failed (this rank's ring only; not published)
    std::int64_t at_us = 0;  // when it was called, for the trace (this rank's ring only)
    std::string trace_note;  // for the trace only (the streams): not published
  };
  // One peer's report as read from the store.
  struct Report {
    std::int64_t published_ms = 0;
    std::vector<Call> calls;  // oldest first
  };

  // store: scoped to the communicator (null: nothing is published or read).
  // options.hang_warn: how long the oldest incomplete call may wait before
  // on_hang hears of it; on_hang defaults to a warning in the log.
  FlightRecorder(std::shared_ptr<Store> store, int rank, int size,
                 std::chrono::milliseconds publish_every = std::chrono::seconds(1),
                 FlightOptions options = {.hang_warn = std::chrono::milliseconds(0)},
                 std::function<void(const std::string&)> on_hang = nullptr);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // From the communicator's caller (one thread at a time), once per
  // collective, in call order; returns its seq. The plain form (op a string
  // literal) allocates nothing, formats no text and takes no lock (the
  // entry is published to readers as a seqlock would: see Entry): the data
  // path's; the text form is for callers that have only text.
  std::uint64_t record(const char* op, const CallArgs& args);
  // Whether the trace is on (RTD_TRACE_DIR): calls then carry notes and spans.
  bool traced() const { return traced_; }
  std::uint64_t record(std::string op, std::string args);
  // Call seq finished (completed or failed); calls may finish in any order.
  void completed(std::uint64_t seq);
  void completed(const std::vector<std::uint64_t>& seqs);  // each of them, under one lock
  // What the trace shows of call seq beside its arguments (the streams it
  // runs on); ranks need not agree on it, so it is not published.
  void annotate(std::uint64_t seq, std::string note);
  // The last n calls, oldest first.
  std::vector<Call> recent(std::size_t n) const;
  // Writes the newest calls to the store if they changed since the last time.
  // Never throws (a store that fails is logged).
  void publish();
  // Why call seq (recorded here) may not complete, from every peer's report:
  // the ranks that have not called it, those that called something else as
  // that seq, and those that called it alike. Reads without waiting; never
  // throws; empty when there is nothing to say (no store, or seq unknown).
  // With a dump directory, also writes the ring there (once per seq).
  std::string diagnose(std::uint64_t seq);
  // The file diagnose() writes the ring to (empty without a dump directory).
  const std::string& dump_path() const { return dump_path_; }

  // The report's text form in the store (exposed for tests).
  static std::string encode(const Report& report);
  static std::optional<Report> decode(const std::string& text);
  // The diagnosis from the reports (nullopt: that rank never reported);
  // exposed for tests. now_ms: the current time, for ages.
  static std::string compare(int rank, const Call& mine,
                             const std::vector<std::optional<Report>>& reports,
                             std::int64_t now_ms);

  // How often a rank of a world of `size` publishes: every second, and in
  // worlds of over 1,000 ranks every size milliseconds, so that the store
  // takes about 1,000 reports a second however large the job.
  static std::chrono::milliseconds publish_interval(int size) {
    return std::max<std::chrono::milliseconds>(std::chrono::seconds(1),
                                               std::chrono::milliseconds(size));
  }

  static constexpr std::size_t kCapacity = 2000;  // calls kept in the ring
  static constexpr std::size_t kPublished = 16;   // newest calls each report carries

 private:
  // What only some calls have: the text form's op and arguments, and a
  // trace's start and note.
  struct Texts {
    std::string op_text;
    std::string args_text;
    std::int64_t at_us = 0;
    std::string trace_note;
  };
  // One call in the ring, as recorded: plain data, or text from the text
  // form; spelled out as a Call when read. One cache line for a plain call:
  // the ring is written a new entry a call, so its lines are cold.
  //
  // The caller writes plain calls without the lock, while readers (under
  // mu_) may read the same entry: state is 0 while the entry is written and
  // seq << 1 (| 1 once done) after, and a reader keeps what it read only if
  // state named the same seq before and after (a seqlock; the fields are
  // relaxed atomics, so that neither side races). What needs mu_ on both
  // sides: texts (the text form, a trace's notes; with a trace on, plain
  // calls are recorded under mu_ too).
  struct alignas(64) Entry {
    std::atomic<std::uint64_t> state{0};
    std::atomic<const char*> op{nullptr};  // the plain form's (a string literal)
    std::atomic<std::size_t> count{0};     // CallArgs, as two words
    std::atomic<std::uint64_t> packed{0};
    std::atomic<std::int64_t> at_ms{0};  // when it was called (coarse::unix_ms)
    std::atomic<bool> has_texts{false};  // texts holds this call's
    std::unique_ptr<Texts> texts;        // kept once made (its storage is reused); mu_
    Texts& own_texts();                  // texts for this call, made or cleared (mu_ held)
    void set_args(const CallArgs& args);
    CallArgs args() const;
  };
  static_assert(sizeof(Entry) == 64, "a ring entry is one cache line");
  // The entry of the next call, emptied (its state 0); publish_entry() makes it
  // call seq for readers and returns seq.
  Entry& begin_entry(std::uint64_t seq);
  Entry& begin_plain(std::uint64_t seq, const char* op, const CallArgs& args);  // and its fields
  std::uint64_t publish_entry(Entry& e, std::uint64_t seq);
  std::uint64_t record_locked(const char* op, const CallArgs& args);  // a trace's (mu_ held)
  // Call seq as recorded, or nullopt if it is not (or no longer) in the ring (mu_ held).
  std::optional<Call> read(std::uint64_t seq) const;
  // seq's place in the ring, if seq may be there, or null.
  const Entry* slot(std::uint64_t seq) const;
  Entry* slot(std::uint64_t seq) {
    return const_cast<Entry*>(static_cast<const FlightRecorder*>(this)->slot(seq));
  }
  void complete(std::uint64_t seq);  // completed()'s work (caller holds mu_)
  // The oldest call in the ring when next is the next call's number. One
  // load of next_seq_ for both ends of a range: the writer takes no lock, and
  // between two loads it may go on by more than the ring holds.
  static std::uint64_t oldest_seq(std::uint64_t next) {
    return next > kCapacity ? next - kCapacity : 1;
  }
  std::string key(int rank) const;
  void publisher_loop();
  void check_hang();  // the live warning
  void dump(std::uint64_t seq, const std::string& diagnosis);

  std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds publish_every_;
  const std::chrono::milliseconds warn_after_;
  std::string dump_path_;
  std::mutex dump_mu_;
  std::uint64_t dumped_seq_ = 0;
  std::function<void(const std::string&)> on_hang_;
  std::uint64_t warned_seq_ = 0;  // the newest call warned about (publisher thread only)
  mutable std::mutex mu_;
  // The newest kCapacity calls: seq s at ring_[(s - 1) % kCapacity].
  std::unique_ptr<Entry[]> ring_;
  std::string trace_track_;  // "comm <n>": this communicator's row in the trace
  const bool traced_;        // the trace is on (trace::enabled(), read once per process)
  // The next call's seq: written by the caller (after the entry's state),
  // read by anyone.
  std::atomic<std::uint64_t> next_seq_{1};
  std::uint64_t published_seq_ = 0;  // newest seq in the store
  std::mutex publish_mu_;            // one publish at a time
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread publisher_;
};

// Marks a recorded call completed if it leaves scope before release(): a call
// that fails before it is launched must not count as waiting.
class UnlaunchedCall {
 public:
  UnlaunchedCall(FlightRecorder* recorder, std::uint64_t call) : recorder_(recorder), call_(call) {}
  ~UnlaunchedCall() {
    if (recorder_ != nullptr && call_ != 0) recorder_->completed(call_);
  }
  UnlaunchedCall(const UnlaunchedCall&) = delete;
  UnlaunchedCall& operator=(const UnlaunchedCall&) = delete;
  void launched() { recorder_ = nullptr; }

 private:
  FlightRecorder* recorder_;
  std::uint64_t call_;
};

// Sorted ranks as text, runs shortened: "0, 2-5, 7".
std::string rank_list(const std::vector<int>& ranks);

// What ranks must agree on in a call: "float32 x 1024" and, if given, ", " + extra.
std::string call_args(const BufferView& buf, const std::string& extra = "");

// One collective as every backend records it and the collective check
// compares it: its name and what ranks must agree on.
struct CallDescription {
  const char* op;
  CallArgs args;
};
namespace describe {
CallDescription all_reduce(const BufferView& in, ReduceOp op);
CallDescription broadcast(const BufferView& buf, int root);
CallDescription all_gather(const BufferView& in);
CallDescription reduce_scatter(const BufferView& out, ReduceOp op);
CallDescription all_to_all(const BufferView& in);
CallDescription barrier();
}  // namespace describe

}  // namespace rtd
