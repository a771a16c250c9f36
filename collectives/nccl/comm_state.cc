// CommState: async-error polling, settle, abort with a bound, orderly shutdown.
#include "collectives/nccl/comm_state.h"

#include <algorithm>
#include <future>
#include <thread>

#include "collectives/nccl/nccl_check.h"
#include "runtime/core/coarse_clock.h"
#include "runtime/core/log.h"

namespace rtd::nccl {
namespace {
constexpr std::chrono::seconds kAbortBound{10};
constexpr std::chrono::milliseconds kSpinBeforeSleep{2};

// Runs fn on a helper thread and waits up to bound; returns false (leaving the
// thread behind) when it overran: NCCL's abort and destroy can hang
// (NVIDIA/nccl#1013), and our callers must not.
template <typename Fn>
bool run_bounded(Fn fn, std::chrono::milliseconds bound) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  std::thread([fn = std::move(fn), done]() mutable {
    fn();
    done->set_value();
  }).detach();
  return finished.wait_for(bound) == std::future_status::ready;
}
}  // namespace

CommState::~CommState() {
  for (const auto& end : ends_) {
    RTD_CUDA_CHECK_WARN(*cuda_, cuda_->event_destroy(end->event), "event destroy");
  }
}

void CommState::refill_locked(bool need_one) {
  spare_ends_.insert(spare_ends_.end(), free_ends_.begin(), free_ends_.end());
  free_ends_.clear();
  if (!need_one || !spare_ends_.empty()) return;
  auto slot = std::make_unique<EndSlot>();
  RTD_CUDA_CHECK(*cuda_, cuda_->event_create(&slot->event), "creating a CUDA event");
  ends_.push_back(std::move(slot));
  spare_ends_.push_back(ends_.back().get());
}

void CommState::free_end_locked(EndSlot* end) {
  end->pass_on();
  free_ends_.push_back(end);
}

// The caller's side of the state, held for one call: the caller takes it
// with one exchange (nobody else wants it but for a moment a watchdog poll or
// a Work that needs its pending end recorded).
class CommState::CallerSide {
 public:
  explicit CallerSide(CommState& s) : held_(s.caller_side_) {
    while (held_.exchange(true, std::memory_order_acquire)) [[unlikely]] std::this_thread::yield();
  }
  ~CallerSide() { held_.store(false, std::memory_order_release); }
  CallerSide(const CallerSide&) = delete;
  CallerSide& operator=(const CallerSide&) = delete;

 private:
  std::atomic<bool>& held_;
};

inline void CommState::flush_or_throw() {
  if (const cudaError_t rc = flush_pending(true); rc != cudaSuccess) [[unlikely]]
    fail_record(rc, pending_name_);
}

// A pending end that could not be recorded: the calls it covers are watched
// by nothing, and the caller may go on calling after catching the error; the
// communicator is marked failed so that every later call is refused (and the
// pending slot, full, takes no more calls).
void CommState::fail_record(cudaError_t rc, const CallName& name) {
  const std::string what = name.text() + ": recording its end";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_) {
      failure_ =
          Error(ErrorCategory::kBackend, "NCCL communicator of rank " + std::to_string(rank_) +
                                             " failed: " + what + ": " + cuda_->error_string(rc));
    }
    failed_.store(true, std::memory_order_release);
  }
  throw_cuda_error(*cuda_, rc, what);
}

void CommState::hand_back(EndSlot* end) {
  end->pass_on();  // its ticket's Work (a group's that never launched) is done
  spare_ends_.push_back(end);
}

void CommState::refill_spare() {
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  refill_locked(true);
}

inline EndTicket CommState::take_end_held() {
  if (spare_ends_.empty()) [[unlikely]]
    refill_spare();
  EndSlot* slot = spare_ends_.back();
  spare_ends_.pop_back();
  slot->later = 0;  // no calls of an earlier use's (mark_completed reads them)
  return EndTicket{slot, slot->generation.load(std::memory_order_relaxed)};
}

EndTicket CommState::take_end() {
  CallerSide held(*this);
  if (pending_ != nullptr) flush_or_throw();  // the group's end comes after them: theirs first
  return take_end_held();
}

void CommState::drop_end(EndTicket end) {
  CallerSide held(*this);
  hand_back(end.slot);
}

void CommState::throw_record_failed(cudaError_t rc, EndTicket end, const CallName& name) {
  hand_back(end.slot);
  fail_record(rc, name);  // the call launched, and nothing watches it
}

inline bool CommState::captured_now(cudaStream_t stream, const CallName& what) {
  bool captured = false;
  RTD_CUDA_CHECK(*cuda_, cuda_->stream_capturing(stream, &captured),
                 what.text() + ": asking whether the stream is captured into a CUDA graph");
  return captured;
}

bool CommState::capturing(cudaStream_t stream, const CallName& what) {
  return captured_now(stream, what);
}

inline void CommState::watch(InFlight&& op) {
  if (++watched_ % kQueryEvery != 0 && launched_.push(std::move(op))) [[likely]]
    return;
  query_newest(std::move(op));
}

cudaError_t CommState::flush_pending(bool ask) {
  EndSlot* p = pending_;
  if (ask) {
    bool captured = false;
    if (const cudaError_t rc = cuda_->stream_capturing(p->stream, &captured); rc != cudaSuccess)
      return rc;
    if (captured) [[unlikely]] {
      set_aside_pending();
      return cudaSuccess;
    }
  }
  if (!set_aside_.empty()) [[unlikely]]
    reclaim_set_aside(p->stream);
  const cudaError_t rc = cuda_->event_record(p->event, p->stream);
  if (rc != cudaSuccess) return rc;
  pending_ = nullptr;
  p->recorded.store(true, std::memory_order_release);
  watch(InFlight{.end = p, .stream = p->stream, .name = std::move(pending_name_)});
  return cudaSuccess;
}

// The pending end's stream is being captured into a CUDA graph: the calls it
// covers were captured (those since the capture began) or made just before
// (and the stream takes no record outside the capture until it ends). Their
// end is recorded into the capture, so that a Work's wait can order another
// stream of the capture after them; their Works are done at once, as a
// captured call's, and they are watched no further. The slot is set aside
// until its stream is seen out of the capture (reclaim_set_aside).
void CommState::set_aside_pending() {
  EndSlot* p = pending_;
  (void)cuda_->event_record(p->event, p->stream);
  pending_ = nullptr;
  p->captured.store(true, std::memory_order_release);
  p->recorded.store(true, std::memory_order_release);
  set_aside_.push_back(p);
  mark_captured(pending_name_,
                std::vector<std::uint64_t>(p->later_calls, p->later_calls + p->later), p->calls);
}

// The stream's capture is over: its set-aside ends go back to the spare ones.
// Their Works read as done (retired), as a captured call's do once its
// capture is over (its end then orders nothing).
void CommState::reclaim_set_aside(cudaStream_t stream) {
  auto kept = set_aside_.begin();
  for (EndSlot* slot : set_aside_) {
    if (slot->stream != stream) {
      *kept++ = slot;
      continue;
    }
    slot->pass_on();
    slot->captured.store(false, std::memory_order_relaxed);
    spare_ends_.push_back(slot);
  }
  set_aside_.erase(kept, set_aside_.end());
}

// Both record_end()s, one body: on the data path every call runs it, so it is
// inlined into them (one stretch of code, not three calls).
inline bool CommState::record_taken(EndTicket end, cudaStream_t stream, CallName&& name,
                                    std::vector<std::uint64_t>&& calls) {
  const cudaError_t rc = cuda_->event_record(end.slot->event, stream);
  if (rc != cudaSuccess) [[unlikely]]
    throw_record_failed(rc, end, name);
  if (captured_now(stream, name)) [[unlikely]] {
    mark_captured(name, calls);
    return true;
  }
  watch(InFlight{
      .end = end.slot, .stream = stream, .name = std::move(name), .calls = std::move(calls)});
  return false;
}

// A call on the caller's stream: covered by the pending end, which it starts
// if there is none (or the pending one is another stream's), and records
// when it is the kEndCovers-th.
inline EndTicket CommState::cover(cudaStream_t stream, const CallName& name) {
  ++covered_;
  EndSlot* p = pending_;
  if (p == nullptr || p->stream != stream) [[unlikely]] {
    if (p != nullptr) flush_or_throw();
    p = take_end_held().slot;
    p->recorded.store(false, std::memory_order_relaxed);
    p->stream = stream;
    p->calls = 0;
    pending_ = p;
    pending_name_ = name;
  } else if (name.recorded != 0 && p->later < kEndCovers - 1) {
    // (Full only after a failed record: the communicator is failed then.)
    p->later_calls[p->later++] = name.recorded;
  }
  // Pending, the slot is in no list: its generation stays until it is recorded.
  const EndTicket ticket{p, p->generation.load(std::memory_order_relaxed)};
  if (++p->calls >= kEndCovers) flush_or_throw();
  return ticket;
}

EndTicket CommState::record_end(cudaStream_t stream, const CallName& name, bool covered) {
  CallerSide held(*this);
  if (covered) [[likely]]
    return cover(stream, name);
  if (pending_ != nullptr) [[unlikely]]
    flush_or_throw();  // this end comes after them
  EndTicket end = take_end_held();
  end.captured = record_taken(end, stream, CallName(name), {});
  return end;
}

bool CommState::record_end(EndTicket end, cudaStream_t stream, CallName name,
                           std::vector<std::uint64_t> calls) {
  CallerSide held(*this);
  if (pending_ != nullptr) [[unlikely]] {
    if (const cudaError_t rc = flush_pending(true); rc != cudaSuccess) {
      hand_back(end.slot);
      fail_record(rc, pending_name_);
    }
  }
  return record_taken(end, stream, std::move(name), std::move(calls));
}

void CommState::record_pending(const EndTicket& end) {
  CallerSide held(*this);
  if (pending_ != end.slot || end.retired()) return;  // recorded meanwhile
  flush_or_throw();
}

// Every kQueryEvery-th call (or with the ring full, which that prevents).
void CommState::query_newest(InFlight&& op) {
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  op.deadline = drain_locked();
  StreamOps& list = list_locked(op.stream);
  // The newest before this one (this one was recorded just now: not done),
  // asked in the relaxed capture mode: this thread may be capturing on another
  // stream, or another thread anywhere.
  if (!list.empty()) {
    RelaxedCapture relaxed(*cuda_);
    if (cuda_->event_query(list.ops.back().end->event) == cudaSuccess) {
      retire_all(list);  // the newest is done, so is everything before it on this stream
    }
  }
  list.ops.push_back(std::move(op));
  refill_locked(false);  // what this and the watchdog's retiring freed, for the next calls
}

void CommState::mark_captured(const CallName& name, const std::vector<std::uint64_t>& calls,
                              std::uint64_t count) {
  captured_.fetch_add(count, std::memory_order_relaxed);
  if (!recorder_) return;
  std::vector<std::uint64_t> numbers = calls;
  if (name.recorded != 0) numbers.push_back(name.recorded);
  for (std::uint64_t call : numbers) {
    recorder_->annotate(call, "captured into a CUDA graph: runs when the graph is launched");
  }
  recorder_->completed(numbers);
}

void CommState::release_captured(EndTicket end) {
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  free_end_locked(end.slot);
}

std::chrono::steady_clock::time_point CommState::drain_locked() {
  // The deadline runs from when the list takes an operation in: at most a
  // watchdog poll or kQueryEvery calls after its launch, so that launching
  // reads no clock. A deadline of seconds needs no finer clock than the tick's.
  const auto deadline = coarse::steady_now() + timeout_;
  launched_.drain([&](InFlight&& op) {
    op.deadline = deadline;
    StreamOps& list = list_locked(op.stream);
    list.ops.push_back(std::move(op));
  });
  return deadline;
}

CommState::StreamOps& CommState::list_locked(cudaStream_t stream) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                         [&](const StreamOps& s) { return s.stream == stream; });
  if (it == in_flight_.end()) it = in_flight_.insert(in_flight_.end(), StreamOps{.stream = stream});
  return *it;
}

std::unique_ptr<const std::string> CallName::copy_text(const std::string& text) {
  return std::make_unique<const std::string>(text);
}

std::string CallName::text() const {
  if (spelled) return *spelled;
  return std::string("nccl ") + op + (recorded != 0 ? " #" + std::to_string(recorded) : "") +
         " on rank " + std::to_string(rank);
}

void CommState::mark_completed(const InFlight& op) {
  if (!recorder_) return;
  if (op.name.recorded != 0) recorder_->completed(op.name.recorded);
  for (std::uint64_t call : op.calls) recorder_->completed(call);
  const EndSlot& end = *op.end;
  for (std::uint32_t i = 0; i < end.later; ++i) recorder_->completed(end.later_calls[i]);
}

void CommState::mark_completed(const StreamOps& list) {
  if (!recorder_) return;
  std::vector<std::uint64_t>& calls = completing_;  // kept: its storage is reused
  calls.clear();
  for (std::size_t i = list.head; i < list.ops.size(); ++i) {
    const InFlight& op = list.ops[i];
    if (op.name.recorded != 0) calls.push_back(op.name.recorded);
    calls.insert(calls.end(), op.calls.begin(), op.calls.end());
    calls.insert(calls.end(), op.end->later_calls, op.end->later_calls + op.end->later);
  }
  recorder_->completed(calls);  // one lock for them all
}

void CommState::retire_front(StreamOps& list, bool succeeded) {
  InFlight& op = list.ops[list.head++];
  // A failed one keeps its slot (its Work's own query reports the error).
  if (succeeded) free_end_locked(op.end);
  op = InFlight{};  // lets go of its name and calls now
  if (list.empty()) {
    list.ops.clear();
    list.head = 0;
  }
}

void CommState::retire_all(StreamOps& list) {
  mark_completed(list);
  for (std::size_t i = list.head; i < list.ops.size(); ++i) free_end_locked(list.ops[i].end);
  list.ops.clear();
  list.head = 0;
}

std::optional<std::string> CommState::overdue() {
  // The watchdog's thread asks in the relaxed capture mode for good: its
  // queries must not break a capture in the global mode on another thread.
  thread_local const bool relaxed = [this] {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cuda_->exchange_capture_mode(&mode) == cudaSuccess) return true;
    log::get("nccl")->warn(
        "rank {}: the watchdog's thread could not enter CUDA's relaxed capture mode; its queries "
        "may break a CUDA graph another thread captures in the global mode",
        rank_);
    return false;
  }();
  (void)relaxed;
  // Calls left pending by a caller that made none for a whole poll (it
  // paused, or waits on the host for them): recorded now, so that they are
  // watched too. Not while the caller records, nor into a capture.
  if (!caller_side_.exchange(true, std::memory_order_acquire)) {
    bool captured = true;
    if (pending_ != nullptr && covered_ == covered_at_poll_ &&
        cuda_->stream_capturing(pending_->stream, &captured) == cudaSuccess && !captured) {
      (void)flush_pending(false);  // a failed record stays pending: the next poll tries again
    }  // (while captured, the caller's next call or Work sets it aside: not into its capture)
    covered_at_poll_ = covered_;
    caller_side_.store(false, std::memory_order_release);
  }
  std::optional<std::pair<std::string, std::uint64_t>> late;  // what, call
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    drain_locked();
    for (StreamOps& list : in_flight_) {
      while (!late && !list.empty()) {
        InFlight& oldest = list.ops[list.head];
        cudaError_t rc = cuda_->event_query(oldest.end->event);
        // A record that a capture begun meanwhile took in: its calls came
        // before the capture, and are not watched after that.
        if (rc == cudaErrorCapturedEvent) rc = cudaSuccess;
        if (rc == cudaErrorNotReady) {
          if (std::chrono::steady_clock::now() >= oldest.deadline)
            late.emplace(oldest.name.text(), oldest.diagnosed());
          break;
        }
        mark_completed(oldest);  // complete, or failed: its Work reports that
        retire_front(list, rc == cudaSuccess);
      }
    }
  }
  if (!late) return std::nullopt;
  // The diagnosis reads the store: outside the lock.
  std::string why = late->first + " did not complete within " + std::to_string(timeout_.count()) +
                    " ms on rank " + std::to_string(rank_) +
                    "; a peer may have failed or not called it";
  if (std::string diagnosis = diagnose(late->second); !diagnosis.empty()) why += "; " + diagnosis;
  return why;
}

std::string CommState::diagnose(std::uint64_t call) {
  return recorder_ && call != 0 ? recorder_->diagnose(call) : "";
}

std::size_t CommState::in_flight() {
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  drain_locked();
  std::size_t n = 0;
  for (const StreamOps& list : in_flight_) n += list.ops.size() - list.head;
  return n;
}

std::optional<Error> CommState::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  // Without an NCCL handle (copy-engine collectives set up on their own, as
  // tests do) only an abort fails it.
  if (failure_ || gone_ || !comm_) return failure_;
  ncclResult_t state = ncclSuccess;
  ncclResult_t rc = nccl_->comm_get_async_error(comm_, &state);
  if (rc != ncclSuccess) state = rc;
  if (state != ncclSuccess && state != ncclInProgress) {
    failure_ = nccl_error(*nccl_, comm_, state,
                          "NCCL communicator of rank " + std::to_string(rank_) + " failed");
    failed_.store(true, std::memory_order_release);
  }
  return failure_;
}

void CommState::set_failure_listener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(listener_mu_);
  listener_ = std::move(listener);
}

void CommState::notify_failure() {
  std::lock_guard<std::mutex> lock(listener_mu_);
  if (!listener_ || notified_ || !failure()) return;
  notified_ = true;
  listener_();
}

void CommState::settle(ncclComm_t comm, const std::string& what,
                       std::chrono::steady_clock::time_point deadline) {
  // Enqueueing usually finishes within microseconds: spin (yielding) for a
  // while before sleeping, since a sleep costs tens of microseconds per call.
  const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = nccl_->comm_get_async_error(comm, &state);
    if (rc != ncclSuccess) throw nccl_error(*nccl_, comm, rc, what);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) throw nccl_error(*nccl_, comm, state, what);
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      if (comm == comm_)
        abort(what + " timed out");
      else
        nccl_->comm_abort(comm);
      throw Error(ErrorCategory::kTimeout,
                  what + " did not finish within the timeout on rank " + std::to_string(rank_) +
                      "; a peer may be missing or stuck (communicator aborted)");
    }
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }
}

void CommState::abort(const std::string& why, ErrorCategory category) {
  if (aborted_.exchange(true)) return;
  ncclComm_t comm;
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_) {
      failure_ = Error(category,
                       "NCCL communicator of rank " + std::to_string(rank_) + " aborted: " + why);
    }
    failed_.store(true, std::memory_order_release);
    comm = gone_ ? nullptr : comm_;
    gone_ = true;
    hooks.swap(abort_hooks_);
  }
  for (auto& hook : hooks) hook();
  std::vector<StreamOps> dropped;  // nothing left to watch
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    drain_locked();
    dropped.swap(in_flight_);
  }
  for (const StreamOps& list : dropped) {
    for (std::size_t i = list.head; i < list.ops.size(); ++i) {
      mark_completed(list.ops[i]);  // failed by the abort
    }
  }
  if (comm == nullptr) return;
  log::get("nccl")->error("rank {}: aborting the NCCL communicator: {}", rank_, why);
  auto nccl = nccl_;
  if (!run_bounded([nccl, comm] { nccl->comm_abort(comm); }, kAbortBound)) {
    log::get("nccl")->error("rank {}: ncclCommAbort did not return within {} s; abandoning it",
                            rank_, kAbortBound.count());
  }
}

void CommState::shutdown() {
  ncclComm_t comm;
  std::set<void*> registrations;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_ || comm_ == nullptr) return;
    comm = comm_;
    registrations.swap(registrations_);
  }
  // Registrations still held by buffers that outlive the communicator end here;
  // their memory stays valid until the buffers themselves are freed.
  for (void* handle : registrations) {
    ncclResult_t rc = nccl_->comm_deregister(comm, handle);
    if (rc != ncclSuccess) {
      log::get("nccl")->warn("rank {}: ncclCommDeregister at shutdown: {}", rank_,
                             nccl_->error_string(rc));
    }
  }
  if (const std::uint64_t captured = captured_.load(std::memory_order_relaxed); captured != 0) {
    log::get("nccl")->warn(
        "rank {}: {} call(s) of this communicator were captured into CUDA graphs; NCCL's "
        "finalize waits until every such graph is destroyed (up to the timeout, {} ms, then "
        "aborts): destroy the graphs first (torch: del the torch.cuda.CUDAGraph before "
        "destroy_process_group)",
        rank_, captured, timeout_.count());
  }
  // Finalize flushes what is in flight; it needs every peer, so it is polled
  // against the timeout, and a peer that is gone turns it into an abort.
  try {
    ncclResult_t rc = nccl_->comm_finalize(comm);
    if (rc != ncclSuccess && rc != ncclInProgress) throw nccl_error(*nccl_, comm, rc, "finalize");
    settle(comm, "finalizing the NCCL communicator", std::chrono::steady_clock::now() + timeout_);
  } catch (const Error& e) {
    abort(std::string("orderly shutdown failed: ") + e.what());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return;  // aborted meanwhile (by a watchdog)
    gone_ = true;
  }
  destroy_other(comm);
}

void CommState::on_abort(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_hooks_.push_back(std::move(hook));
}

void* CommState::register_buffer(void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (gone_ || comm_ == nullptr) {
    throw Error(ErrorCategory::kBackend, "registering memory with an NCCL communicator of rank " +
                                             std::to_string(rank_) + " that is gone");
  }
  void* handle = nullptr;
  ncclResult_t rc = nccl_->comm_register(comm_, ptr, bytes, &handle);
  if (rc != ncclSuccess) {
    throw nccl_error(
        *nccl_, comm_, rc,
        "ncclCommRegister of " + std::to_string(bytes) + " bytes on rank " + std::to_string(rank_));
  }
  registrations_.insert(handle);
  return handle;
}

void CommState::deregister_buffer(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (gone_ || registrations_.erase(handle) == 0) return;
  ncclResult_t rc = nccl_->comm_deregister(comm_, handle);
  if (rc != ncclSuccess) {
    log::get("nccl")->warn("rank {}: ncclCommDeregister: {}", rank_, nccl_->error_string(rc));
  }
}

void CommState::destroy_other(ncclComm_t comm) {
  auto nccl = nccl_;
  if (!run_bounded([nccl, comm] { nccl->comm_destroy(comm); }, kAbortBound)) {
    log::get("nccl")->error("rank {}: ncclCommDestroy did not return within {} s; abandoning it",
                            rank_, kAbortBound.count());
  }
}

}  // namespace rtd::nccl
