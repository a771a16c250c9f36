// CommState: what a communicator and its outstanding Works share: the NCCL
// handle, the APIs, the end events, and abort. Works may outlive their
// communicator, so the handle is guarded and marked gone once destroyed.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collectives/flight_recorder.h"
#include "collectives/nccl/cuda_api.h"
#include "collectives/nccl/handoff_ring.h"
#include "collectives/nccl/nccl_api.h"
#include "rt_dist/error.h"

namespace rtd::nccl {

// An operation's name in errors ("nccl all_reduce #12 on rank 3"), kept as
// its parts and spelled out only when an error needs it: a call that
// succeeds, nearly all of them, formats no string.
struct CallName {
  const char* op = "";         // a string literal
  std::uint64_t recorded = 0;  // its flight-recorder number (0: not recorded)
  int rank = 0;
  // The whole name, where it was given as text (of()); a pointer, so that the
  // names of NCCL's calls (none) copy and move as three words.
  std::unique_ptr<const std::string> spelled;

  CallName() = default;
  CallName(const char* op_, std::uint64_t recorded_, int rank_)
      : op(op_), recorded(recorded_), rank(rank_) {}
  CallName(const CallName& o) : op(o.op), recorded(o.recorded), rank(o.rank) {
    if (o.spelled) [[unlikely]]
      spelled = copy_text(*o.spelled);
  }
  CallName& operator=(const CallName& o) {
    if (this != &o) *this = CallName(o);
    return *this;
  }
  CallName(CallName&&) noexcept = default;
  CallName& operator=(CallName&&) noexcept = default;
  static CallName of(std::string text, std::uint64_t recorded = 0) {
    CallName name;
    name.recorded = recorded;
    name.spelled = std::make_unique<const std::string>(std::move(text));
    return name;
  }
  std::string text() const;

 private:
  static std::unique_ptr<const std::string> copy_text(const std::string& text);
};

// The calls one end event covers at most: a small call on the caller's stream
// records no end event of its own; the end recorded after a later one on that
// stream covers it (the stream runs them in order): every kEndCovers-th call
// records one, and so do a call on another stream, a Work that needs its
// end, and the watchdog after a pause (CommState::record_end).
inline constexpr std::uint32_t kEndCovers = 8;

// An operation's end event as its Work holds it: a slot of the CommState's
// and the slot's generation when the operation took it. The in-flight list
// hands a slot on to a later operation only after it saw this one complete,
// and bumps the generation then: a Work whose generation is gone knows that
// its operation completed. No shared count, no allocation per operation.
struct EndSlot {
  cudaEvent_t event = nullptr;
  std::atomic<std::uint32_t> generation{0};
  // False while the slot waits for its event to be recorded after the calls
  // it covers (CommState's pending end); a Work that needs the event then
  // asks CommState::record_pending.
  std::atomic<bool> recorded{true};
  // Set aside: recorded into a CUDA graph's capture with the calls it
  // covers (CommState::set_aside_pending); its Works are done at once. Back
  // in circulation (a new generation) once its stream is out of the capture.
  std::atomic<bool> captured{false};
  // Its operation is over (completed, or never launched): tickets of this
  // generation read as retired. Only the slot's holder of the moment calls
  // it (the in-flight list's lock holder, or the caller for a spare slot): a
  // store, not a read-modify-write. Release: whoever sees the new generation
  // also sees that the operation completed.
  void pass_on() {
    generation.store(generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // A pending end's calls: the stream, how many calls, and the
  // flight-recorder numbers of those after the first (whose number is in the
  // in-flight entry's name).
  cudaStream_t stream = nullptr;
  std::uint32_t calls = 0;
  std::uint32_t later = 0;
  std::uint64_t later_calls[kEndCovers - 1] = {};
};
struct EndTicket {
  EndSlot* slot = nullptr;
  std::uint32_t generation = 0;
  // The operation was captured into a CUDA graph (record_end): the slot is
  // its Work's until the Work goes (release_captured), never the in-flight list's.
  bool captured = false;
  // The operation completed and the slot went on (or is free again).
  bool retired() const { return slot->generation.load(std::memory_order_acquire) != generation; }
  // Its end is still to be recorded (CommState::record_pending records it).
  bool pending() const { return !slot->recorded.load(std::memory_order_acquire); }
  // Its end was set aside into a capture (EndSlot::captured) and not yet reclaimed.
  bool set_aside() const { return slot->captured.load(std::memory_order_acquire) && !retired(); }
};

class CommState {
 public:
  // record_end() calls per query of the newest operation. A query costs
  // 0.8-2.4 us on H200 hosts: 0.05-0.08 us a call made every 16th, 0.02-0.03
  // every 64th (411ccc3:docs/benchmarks.md); the slots in flight between queries are
  // events only.
  static constexpr std::uint64_t kQueryEvery = 64;

  CommState(std::shared_ptr<NcclApi> nccl, std::shared_ptr<CudaApi> cuda, int rank,
            std::chrono::milliseconds timeout)
      : nccl_(std::move(nccl)), cuda_(std::move(cuda)), rank_(rank), timeout_(timeout) {}
  ~CommState();  // destroys the end events

  NcclApi& nccl() { return *nccl_; }
  CudaApi& cuda() { return *cuda_; }
  int rank() const { return rank_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  ncclComm_t comm() const { return comm_; }
  void set_comm(ncclComm_t comm) { comm_ = comm; }

  // [In flight] Records an operation's end event on stream, just after the
  // operation, and watches it until it completes: an operation that has not
  // completed by its deadline (a timeout after the in-flight list took it in,
  // at most a watchdog poll after its launch) aborts the communicator, even
  // if nobody waits for it on the host (a trainer that only orders its stream
  // after it). The caller hands it to the watchdog thread through a ring
  // (HandoffRing: no lock on the caller's side), and takes its end slot from
  // slots of its own; every kQueryEvery-th call it takes the in-flight lock,
  // and, since operations on one stream complete in order, retires all before
  // it on its stream with one query of the newest. The flight-recorder
  // numbers marked completed there once the end event fires: name.recorded,
  // and a group's calls. Returns the Work's ticket.
  // These, take_end and drop_end come from the communicator's caller (one
  // thread at a time, as every call on a communicator).
  // [Covered] With covered (a call on the caller's stream), the end is left
  // to later calls (kEndCovers): the ticket is the pending end's, recorded
  // by the kEndCovers-th call, by the first call on another stream or with
  // its own end, by a Work that needs it (record_pending), or by the
  // watchdog once the caller made no covered call for a whole poll (overdue:
  // a tenth of the timeout, at most 100 ms; not while the stream is
  // captured). Whether the stream is captured is asked once an end, as it is
  // recorded (set_aside_pending). The caller's side of the state (the spare
  // slots, the pending end, the ring's producer end) is held by whoever
  // records, under a flag the caller takes with one exchange (CallerSide).
  // name is copied only where kept (an end recorded or begun): most covered
  // calls keep only its number.
  EndTicket record_end(cudaStream_t stream, const CallName& name, bool covered = false);
  // A Work whose end is pending needs its event now (a wait or a query):
  // records it, unless another thread just did.
  void record_pending(const EndTicket& end);
  // Whether stream is being captured into a CUDA graph; throws, naming what, if CUDA cannot say.
  bool capturing(cudaStream_t stream, const CallName& what);
  // A group's Work is made before its calls: its end slot is taken then
  // (take_end), and recorded and watched after them (record_end(end, ...)),
  // or given back if the group never launched (drop_end).
  EndTicket take_end();
  // Returns whether the stream captured it.
  bool record_end(EndTicket end, cudaStream_t stream, CallName name,
                  std::vector<std::uint64_t> calls);
  void drop_end(EndTicket end);
  // [Capture] An operation captured into a CUDA graph runs only when the
  // graph is launched, as often as it is: there is nothing to watch now, and
  // a query of an event recorded during the capture breaks the capture.
  // record_end asks whether the stream is captured (after the record, once an
  // end: a stream the caller's capture forked into is captured too); if so,
  // the end event stays recorded (another stream may be ordered after it, and
  // a forked capture joins back through it) but is neither queried nor
  // watched, the flight recorder marks the calls completed with a note, the
  // ticket says captured, and the Work holds the slot and gives it back
  // (release_captured, any thread). A covered calls' end found captured is
  // set aside alike (set_aside_pending).
  void release_captured(EndTicket end);
  // Records an end the caller left pending for a whole poll; retires
  // completed operations from the oldest end of each stream; names the
  // oldest one still running past its deadline, if any, with the flight
  // recorder's diagnosis (the watchdog thread calls this a few times per timeout).
  std::optional<std::string> overdue();
  std::size_t in_flight();  // ends watched (not those pending)

  // The flight recorder of the communicator's calls, and its diagnosis of one
  // (empty without a recorder).
  void set_recorder(std::shared_ptr<FlightRecorder> recorder) { recorder_ = std::move(recorder); }
  std::string diagnose(std::uint64_t call);
  // Records a collective made outside the communicator's own calls (the
  // copy-engine all-reduce); its number, or 0 without a recorder.
  FlightRecorder* recorder() { return recorder_.get(); }
  std::uint64_t record(std::string op, std::string args) {
    return recorder_ ? recorder_->record(std::move(op), std::move(args)) : 0;
  }
  std::uint64_t record(const CallDescription& call) {
    return recorder_ ? recorder_->record(call.op, call.args) : 0;
  }

  // The communicator's error once it failed (an asynchronous NCCL error or an abort).
  std::optional<Error> failure();
  // Whether failure() has found an error or an abort happened: one atomic
  // load, for the data path, which asks failure() itself only now and then
  // (NCCL refuses a call on a communicator with an asynchronous error anyway).
  bool known_failed() const { return failed_.load(std::memory_order_acquire); }
  // Communicator::on_failure's listener, and the watchdog thread's check for
  // it: with a listener, asks failure() and runs it once when that has an error.
  void set_failure_listener(std::function<void()> listener);
  void notify_failure();
  // Polls NCCL until the last call on the communicator finished (nonblocking
  // mode answers ncclInProgress meanwhile); aborts and throws kTimeout at deadline.
  void settle(ncclComm_t comm, const std::string& what,
              std::chrono::steady_clock::time_point deadline);
  // Aborts once, in bounded time (ncclCommAbort on a helper thread that is
  // abandoned if it overruns); later operations fail with why, as category.
  void abort(const std::string& why, ErrorCategory category = ErrorCategory::kBackend);
  // Orderly end: finalize (polled against the timeout), then destroy; abort on
  // failure. NCCL's finalize waits until every CUDA graph that captured a call
  // of the communicator is destroyed: with captured calls, it says so first.
  void shutdown();
  // Destroys a communicator other than comm() (the one init used), in bounded time.
  void destroy_other(ncclComm_t comm);

  // Runs hook (once, on the aborting thread) when the communicator aborts:
  // work outside NCCL that waits on peers releases its waits there.
  void on_abort(std::function<void()> hook);

  // ncclCommRegister of [ptr, ptr + bytes) with comm(); throws on failure.
  void* register_buffer(void* ptr, std::size_t bytes);
  // Undoes one registration, unless the communicator is gone (its registrations
  // went with it) or shutdown() already undid it. Never throws.
  void deregister_buffer(void* handle);

 private:
  std::shared_ptr<NcclApi> nccl_;
  std::shared_ptr<CudaApi> cuda_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  // What every call reads or writes, together after the handles above (the
  // object's first two cache lines), where the caches NCCL's call left find
  // them in as few lines as may be. caller_side_ to covered_ are the caller's
  // side (under CallerSide), as are the fields after class CallerSide below.
  std::shared_ptr<FlightRecorder> recorder_;
  std::atomic<bool> failed_{false};       // failure_ is set
  std::atomic<bool> caller_side_{false};  // held (CallerSide)
  EndSlot* pending_ = nullptr;            // the calls since the last end recorded on its stream
  std::uint64_t covered_ = 0;             // calls covered so far
  std::mutex mu_;
  std::set<void*> registrations_;  // live ncclCommRegister handles
  std::vector<std::function<void()>> abort_hooks_;
  struct InFlight {
    EndSlot* end = nullptr;
    std::chrono::steady_clock::time_point deadline;
    cudaStream_t stream = nullptr;
    CallName name;
    std::vector<std::uint64_t> calls;  // more flight-recorder numbers (a group's)
    std::uint64_t diagnosed() const {
      return name.recorded ? name.recorded : calls.empty() ? 0 : calls.front();
    }
  };
  // One stream's operations in flight, oldest first from head; the vector
  // keeps its storage as operations retire, so watching allocates nothing.
  struct StreamOps {
    cudaStream_t stream = nullptr;
    std::vector<InFlight> ops;
    std::size_t head = 0;  // ops before it have retired
    bool empty() const { return head == ops.size(); }
  };
  // The caller's side (under CallerSide):
  class CallerSide;
  CallName pending_name_;              // its first call's name
  std::uint64_t covered_at_poll_ = 0;  // covered_ at the watchdog's last poll
  EndTicket take_end_held();
  void hand_back(EndSlot* end);  // a slot taken and never recorded: to the spare ones
  void refill_spare();           // spare_ends_ is empty: takes the lock and refills it
  // Records the pending end on its stream and hands it to the watchdog; with
  // ask, first asks whether its stream is captured now (then
  // set_aside_pending). A failed record or question (returned) leaves it pending.
  cudaError_t flush_pending(bool ask);
  // flush_pending(true); a failure thrown, naming the pending end's first call.
  void flush_or_throw();
  // A failed record of a pending end: the communicator marked failed, the error thrown.
  [[noreturn]] void fail_record(cudaError_t rc, const CallName& name);
  void set_aside_pending();  // its stream is captured: recorded in the capture, watched no further
  void reclaim_set_aside(cudaStream_t stream);  // that stream is out of its capture
  std::vector<EndSlot*> set_aside_;             // set_aside_pending's, until then
  void watch(InFlight&& op);  // to the ring, or the in-flight list every kQueryEvery-th
  bool captured_now(cudaStream_t stream, const CallName& what);  // capturing(), inlined
  bool record_taken(EndTicket end, cudaStream_t stream, CallName&& name,
                    std::vector<std::uint64_t>&& calls);       // both record_end()s
  EndTicket cover(cudaStream_t stream, const CallName& name);  // record_end with cover
  void query_newest(InFlight&& op);  // record_end's every kQueryEvery-th call
  [[noreturn]] void throw_record_failed(cudaError_t rc, EndTicket end, const CallName& name);
  // With in_flight_mu_ held:
  // The ring's operations into their lists, with their deadline (returned).
  std::chrono::steady_clock::time_point drain_locked();
  StreamOps& list_locked(cudaStream_t stream);         // that stream's, made if new
  void refill_locked(bool need_one);                   // free slots to the caller's spare ones
  void free_end_locked(EndSlot* end);                  // its operation completed: to the next
  void retire_front(StreamOps& list, bool succeeded);  // the oldest finished
  void retire_all(StreamOps& list);                    // the newest completed, so all did
  void mark_completed(const InFlight& op);             // in the flight recorder
  void mark_completed(const StreamOps& list);          // all of them (in_flight_mu_ held)
  std::vector<std::uint64_t> completing_;              // mark_completed(list)'s (in_flight_mu_)
  // Operations launched and not yet in in_flight_: twice the query period, so
  // that the caller's every kQueryEvery-th call empties it before it fills.
  HandoffRing<InFlight, 2 * kQueryEvery> launched_;
  std::mutex in_flight_mu_;
  std::vector<StreamOps> in_flight_;
  std::vector<std::unique_ptr<EndSlot>> ends_;  // every end slot, for the destructor
  std::vector<EndSlot*> free_ends_;             // freed by the in-flight list (in_flight_mu_)
  // The caller's: slots to take without the lock, and its calls so far.
  std::vector<EndSlot*> spare_ends_;
  std::uint64_t watched_ = 0;
  std::atomic<std::uint64_t> captured_{0};  // operations captured into CUDA graphs
  // count: how many calls of the communicator that is (name's, calls' and any not recorded).
  void mark_captured(const CallName& name, const std::vector<std::uint64_t>& calls,
                     std::uint64_t count = 1);
  std::atomic<bool> aborted_{false};
  bool gone_ = false;  // the handle was destroyed or aborted
  std::optional<Error> failure_;
  std::mutex listener_mu_;  // held while the listener runs
  std::function<void()> listener_;
  bool notified_ = false;
};

}  // namespace rtd::nccl
