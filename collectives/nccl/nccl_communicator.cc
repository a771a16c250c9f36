// NcclCommunicator: setup, the launch idiom, and each operation's checks.
#include "collectives/nccl/nccl_communicator.h"

#include <cstdio>

#include "collectives/nccl/ce_all_reduce.h"
#include "collectives/nccl/ce_shard_collective.h"
#include "collectives/nccl/direct_init.h"
#include "collectives/nccl/nccl_bootstrap.h"
#include "collectives/nccl/nccl_check.h"
#include "collectives/nccl/nccl_types.h"
#include "collectives/nccl/nccl_work.h"
#include "collectives/validate.h"
#include "rt_dist/trace.h"
#include "runtime/core/log.h"

namespace rtd::nccl {
namespace {
constexpr std::uint64_t kFailureQueryEvery = 16;  // launches per query of NCCL's async error

std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + timeout;
}

// NCCL rejects a minimum block count without a maximum, or above it, with an
// opaque "invalid argument" at init; say which setting to change instead.
void check_cta_bounds(const NcclSettings& s) {
  if (s.min_ctas > 0 && s.max_ctas <= 0) {
    throw Error(ErrorCategory::kConfig,
                "NCCL minCTAs=" + std::to_string(s.min_ctas) +
                    " needs maxCTAs too (NCCL rejects a minimum alone); set RTD_NCCL_MAX_CTAS "
                    "(NcclSettings.max_ctas) as well");
  }
  if (s.min_ctas > 0 && s.min_ctas > s.max_ctas) {
    throw Error(ErrorCategory::kConfig, "NCCL minCTAs=" + std::to_string(s.min_ctas) +
                                            " is above maxCTAs=" + std::to_string(s.max_ctas) +
                                            "; check RTD_NCCL_MIN_CTAS and RTD_NCCL_MAX_CTAS");
  }
}

}  // namespace

namespace {
// A staged site measures its two methods over its first 8 calls, and again
// after 1000 more (then 2000, ...): the trials' cost is a few calls in
// thousands.
constexpr MethodChoice::Options kSiteChoice{.trials = 3, .margin = 0.05, .recheck = 1000};
}  // namespace

void NcclCommunicator::start_watchdog() {
  std::weak_ptr<CommState> state = state_;
  watchdog_ = std::make_unique<CallWatchdog>(
      options_.timeout,
      [state](const std::string& why) {
        if (auto s = state.lock()) s->abort(why);
      },
      [state] {  // operations in flight that nobody waits for on the host
        if (auto s = state.lock()) {
          if (auto why = s->overdue()) s->abort(*why, ErrorCategory::kTimeout);
          s->notify_failure();
        }
      });
}

// The data path runs on a blocking communicator: a nonblocking one hands
// every later call to a helper thread (about 70 us each on H200, measured);
// its calls that could wait on a peer are bounded by the CallWatchdog. By
// default (settings.direct_init) it is made directly, a blocking init on a
// thread of its own waited for until the deadline (direct_init.h). With
// direct_init = 0, [two communicators]: init runs on a nonblocking
// communicator, polled against the deadline and aborted there, and the
// blocking one is split off it (0.6 s more on 2 GPUs, 411ccc3:docs/benchmarks.md).
NcclCommunicator::NcclCommunicator(NcclOptions options)
    : rank_(options.rank),
      size_(options.size),
      inline_bytes_(std::max(options.settings.inline_bytes, 0LL)),
      options_(std::move(options)) {
  if (!options_.nccl) options_.nccl = real_nccl_api();
  if (!options_.cuda) options_.cuda = real_cuda_api();
  validate::rank_in_range("nccl init", "rank", rank_, size_);
  check_cta_bounds(options_.settings);
  const auto started = std::chrono::steady_clock::now();
  state_ = std::make_shared<CommState>(options_.nccl, options_.cuda, rank_, options_.timeout);
  create_stream_and_scratch();
  const std::string who = "rank " + std::to_string(rank_);
  auto deadline = deadline_after(options_.timeout);
  ncclUniqueId id = exchange_unique_id(*options_.store, *options_.nccl,
                                       JoinWait{.communicator = options_.name,
                                                .rank = rank_,
                                                .peer = "rank 0",
                                                .timeout = options_.timeout,
                                                .warn_every = options_.flight.hang_warn});
  const auto id_known = std::chrono::steady_clock::now();
  const bool direct = options_.settings.direct_init != 0;  // -1 (unresolved): the default
  double split_ms = 0;
  mark_arrival();
  try {
    if (direct) {
      init_directly(id, who, deadline);
    } else {
      split_ms = init_and_split(id, who, deadline);
    }
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kTimeout) throw;
    throw Error(e.category(), std::string(e.what()) + "; " + missing_at_init(), e.backend_code());
  }
  const auto initialized = std::chrono::steady_clock::now();
  start_recorder();
  if (options_.settings.staged_copy_engines && size_ > 1) {
    auto scope = [this] {
      return make_prefix_store("staged/" + std::to_string(persistent_seq_++), options_.store);
    };
    staged_ = std::make_unique<StagedCollectives>(
        options_.device, size_,
        [this, scope](CopyEnginePushCollective::Kind kind, const BufferView& shape, ReduceOp op,
                      std::string* why) {
          auto store = scope();
          return CopyEnginePushCollective::create(ce_setup({}, op, store.get()), kind, shape.count,
                                                  shape.dtype, why);
        },
        [this, scope](BufferView staging, std::string* why) {
          auto store = scope();
          return std::unique_ptr<PersistentShardCollective>(CopyEngineShardCollective::create(
              ce_setup({staging}, ReduceOp::kSum, store.get()), true, why));
        },
        parse_site_rules(options_.settings.staged_sites), kSiteChoice);
  }
  auto ms = [](auto from) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - from)
        .count();
  };
  // NCCL's own initialization apart from the wait for rank 0's unique id
  // (in-process recovery measures what its rebuild costs).
  const double own_ms = std::chrono::duration<double, std::milli>(initialized - id_known).count();
  char how[96];
  if (direct) {
    std::snprintf(how, sizeof(how), "the blocking communicator made directly, no split");
  } else {
    std::snprintf(how, sizeof(how),
                  "%.0f ms the first communicator, %.0f ms the blocking one split from it",
                  own_ms - split_ms, split_ms);
  }
  log::get("nccl")->info(
      "NCCL communicator of {} ranks ready on GPU {} in {:.0f} ms ({:.0f} ms of it NCCL's own "
      "initialization, after the unique id: {}; {:.0f} ms what follows)",
      size_, options_.device, ms(started), own_ms, how, ms(initialized));
}

void NcclCommunicator::start_recorder() {
  state_->set_recorder(std::make_shared<FlightRecorder>(
      options_.store, rank_, size_, FlightRecorder::publish_interval(size_), options_.flight));
}

void NcclCommunicator::throw_call_failed(ncclResult_t rc, const std::string& what) {
  if (watchdog_ && watchdog_->fired()) {
    throw Error(ErrorCategory::kTimeout,
                what + " did not return within " + std::to_string(options_.timeout.count()) +
                    " ms on rank " + std::to_string(rank_) +
                    "; a peer may be missing or stuck (communicator aborted)");
  }
  // A call refused because the communicator failed names the failure.
  if (auto failure = state_->failure()) {
    throw Error(failure->category(), what + ": " + failure->what(), failure->backend_code());
  }
  throw nccl_error(state_->nccl(), state_->comm(), rc, what);
}

NcclCommunicator::~NcclCommunicator() {
  if (!state_) return;
  if (watchdog_) {
    CallWatchdog::Scope scope(*watchdog_, "finalizing the communicator");
    state_->shutdown();
  } else {
    state_->shutdown();
  }
  watchdog_.reset();
  log::get("nccl")->debug("rank {}: {} of {} calls answered ncclInProgress; {} us settling them",
                          rank_, in_progress_, seq_,
                          std::chrono::duration_cast<std::chrono::microseconds>(settling_).count());
  CudaApi& cuda = state_->cuda();
  if (scratch_) RTD_CUDA_CHECK_WARN(cuda, cuda.free(scratch_), "freeing the barrier scratch");
  if (start_) RTD_CUDA_CHECK_WARN(cuda, cuda.event_destroy(start_), "destroying an event");
  if (stream_) RTD_CUDA_CHECK_WARN(cuda, cuda.stream_destroy(stream_), "destroying the stream");
}

// An average over one rank is a sum: NCCL before 2.29.7 computes a
// one-rank average with a kernel that leaves the last elements of an
// out-of-place output unwritten when the count does not divide evenly among
// its blocks (NVIDIA/nccl#1950); a one-rank sum is a plain copy.
ncclRedOp_t NcclCommunicator::reduction(ReduceOp op) const {
  return size_ == 1 && op == ReduceOp::kAvg ? ncclSum : to_nccl(op);
}

// What launch() does off its usual path.
void NcclCommunicator::refuse_if_failed(const CallName& name) {
  if (auto failure = state_->failure()) {
    throw Error(failure->category(), name.text() + ": " + failure->what(), failure->backend_code());
  }
}

void NcclCommunicator::annotate_streams(std::uint64_t recorded, cudaStream_t run_on,
                                        cudaStream_t caller_stream) {
  char note[96];
  std::snprintf(note, sizeof(note), "on stream %p after caller stream %p",
                static_cast<void*>(run_on), static_cast<void*>(caller_stream));
  state_->recorder()->annotate(recorded, note);
}

void NcclCommunicator::order_after_caller(cudaStream_t caller_stream, const CallName& name) {
  CudaApi& cuda = state_->cuda();
  RTD_CUDA_CHECK(cuda, cuda.event_record(start_, caller_stream),
                 name.text() + ": recording on the caller's stream");
  RTD_CUDA_CHECK(cuda, cuda.stream_wait_event(stream_, start_),
                 name.text() + ": ordering after the caller");
}

void NcclCommunicator::settle_or_throw(ncclResult_t rc, const CallName& name) {
  if (watchdog_->fired() || rc != ncclInProgress) throw_call_failed(rc, name.text());
  auto start = std::chrono::steady_clock::now();
  state_->settle(state_->comm(), name.text(), deadline_after(options_.timeout));
  ++in_progress_;
  settling_ += std::chrono::steady_clock::now() - start;
}

std::shared_ptr<Work> NcclCommunicator::join_group(std::uint64_t recorded) {
  if (recorded != 0) group_calls_.push_back(recorded);
  return group_work_;
}

template <typename Call>
std::shared_ptr<Work> NcclCommunicator::launch(const char* op, std::uint64_t recorded,
                                               StreamRef caller, std::size_t bytes, Call&& call) {
  ++seq_;
  UnlaunchedCall unlaunched(state_->recorder(), recorded);
  // Collectives by their flight-recorder number (1-based, collectives only);
  // the name is spelled out only for an error.
  CallName name(op, recorded, rank_);
  // A failure already known refuses the call; NCCL's asynchronous error is
  // asked for on every kFailureQueryEvery-th call only (NCCL itself refuses a
  // call on a failed communicator, and throw_call_failed then names why).
  if (state_->known_failed() || seq_ % kFailureQueryEvery == 0) [[unlikely]]
    refuse_if_failed(name);
  auto caller_stream = static_cast<cudaStream_t>(caller.cuda_stream);
  // A small call runs on the caller's stream itself (inline_bytes_): no
  // events between the two streams, at the price of the caller's later work
  // waiting for it.
  const bool on_caller =
      caller_stream != nullptr && !group_work_ && inline_bytes_ != 0 && bytes <= inline_bytes_;
  cudaStream_t run_on = on_caller ? caller_stream : stream_;
  if (recorded != 0 && state_->recorder()->traced()) [[unlikely]]
    annotate_streams(recorded, run_on, caller_stream);
  if (!on_caller) order_after_caller(caller_stream, name);
  ncclResult_t rc;
  {
    CallWatchdog::Scope scope(*watchdog_, op);
    rc = call(run_on);
  }
  // ncclInProgress is settled there; any other failure, or the watchdog's
  // cut-off, throws.
  if (rc != ncclSuccess || watchdog_->fired()) [[unlikely]]
    settle_or_throw(rc, name);
  if (group_work_) [[unlikely]] {  // the group's end event completes it
    unlaunched.launched();
    return join_group(recorded);
  }
  // A call on the caller's stream may leave its end to a later one (covered):
  // not on the legacy or a per-thread default stream, which another thread
  // (the watchdog's, a Work's) cannot name for a record.
#ifdef RTD_AB_WITHOUT_COVERED
  const bool covered = false;
#else
  const bool covered =
      on_caller && caller_stream != cudaStreamLegacy && caller_stream != cudaStreamPerThread;
#endif
  const EndTicket end = state_->record_end(run_on, name, covered);
  unlaunched.launched();
  return std::make_shared<NcclWork>(state_, end, std::move(name),
                                    on_caller ? caller_stream : nullptr);
}

StagedCollectives::Slot* NcclCommunicator::staged_slot_for(StagedCollectives::Kind kind,
                                                           const BufferView& in, ReduceOp op,
                                                           std::size_t moved_bytes,
                                                           StreamRef stream) {
  if (group_work_ || moved_bytes < StagedCollectives::kMinBytes) return nullptr;
  const CallName name("staged collective", 0, rank_);
  if (state_->capturing(static_cast<cudaStream_t>(stream.cuda_stream), name)) return nullptr;
  return staged_->slot_for(kind, in, op, moved_bytes);
}

template <typename Call>
std::shared_ptr<Work> NcclCommunicator::launch_site(const char* op, std::uint64_t recorded,
                                                    StreamRef caller, StagedCollectives::Slot& slot,
                                                    const BufferView& in, const BufferView& out,
                                                    std::size_t bytes, Call&& kernels) {
  const Method method =
      StagedCollectives::method_for_call(slot, [this](MethodChoice::Sums& s) { agree(s); });
  const bool engines = method == Method::kCopyEngines;
  return launch(op, recorded, caller, engines ? kNever : bytes, [&](cudaStream_t s) {
    StagedCollectives::begin_call(slot, StreamRef{s});
    ncclResult_t rc = ncclSuccess;
    if (engines) {
      StagedCollectives::run(slot, in, out, StreamRef{s});
    } else {
      rc = kernels(s);
    }
    StagedCollectives::end_call(slot, StreamRef{s});
    return rc;
  });
}

void NcclCommunicator::agree(MethodChoice::Sums& sums) {
  if (!agreement_) agreement_ = std::make_unique<SiteAgreement>(options_.device);
  const std::string what = "agreeing on a staged site's method";
  {
    CallWatchdog::Scope scope(*watchdog_, what.c_str());
    agreement_->sum(sums, stream_, [&](double* buf, cudaStream_t s) {
      const ncclResult_t rc =
          state_->nccl().all_reduce(buf, buf, sums.size(), ncclFloat64, ncclSum, state_->comm(), s);
      if (rc != ncclSuccess) throw_call_failed(rc, what);
    });
  }
  if (watchdog_->fired()) throw_call_failed(ncclSuccess, what);
}

std::shared_ptr<Work> NcclCommunicator::all_reduce(BufferView in, BufferView out, ReduceOp op,
                                                   StreamRef stream) {
  validate::all_reduce(in, out, op, DeviceType::kCuda);
  auto kernels = [&](cudaStream_t s) {
    return state_->nccl().all_reduce(in.data, out.data, in.count, to_nccl(in.dtype), reduction(op),
                                     state_->comm(), s);
  };
  if (auto* slot = staged_slot(StagedCollectives::Kind::kAllReduce, in, op, in.bytes(), stream)) {
    return launch_site("all_reduce", record(describe::all_reduce(in, op)), stream, *slot, in, out,
                       in.bytes(), kernels);
  }
  return launch("all_reduce", record(describe::all_reduce(in, op)), stream, in.bytes(), kernels);
}

std::shared_ptr<Work> NcclCommunicator::broadcast(BufferView buf, int root, StreamRef stream) {
  validate::broadcast(buf, root, size_, DeviceType::kCuda);
  return launch("broadcast", record(describe::broadcast(buf, root)), stream, buf.bytes(),
                [&](cudaStream_t s) {
                  return state_->nccl().broadcast(buf.data, buf.data, buf.count, to_nccl(buf.dtype),
                                                  root, state_->comm(), s);
                });
}

std::shared_ptr<Work> NcclCommunicator::all_gather(BufferView in, BufferView out,
                                                   StreamRef stream) {
  validate::all_gather(in, out, size_, DeviceType::kCuda);
  auto kernels = [&](cudaStream_t s) {
    return state_->nccl().all_gather(in.data, out.data, in.count, to_nccl(in.dtype), state_->comm(),
                                     s);
  };
  if (auto* slot = staged_slot(StagedCollectives::Kind::kAllGather, in, ReduceOp::kSum, out.bytes(),
                               stream)) {
    return launch_site("all_gather", record(describe::all_gather(in)), stream, *slot, in, out,
                       out.bytes(), kernels);
  }
  return launch("all_gather", record(describe::all_gather(in)), stream, out.bytes(), kernels);
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                                       StreamRef stream) {
  validate::reduce_scatter(in, out, op, size_, DeviceType::kCuda);
  auto kernels = [&](cudaStream_t s) {
    return state_->nccl().reduce_scatter(in.data, out.data, out.count, to_nccl(in.dtype),
                                         reduction(op), state_->comm(), s);
  };
  if (auto* slot =
          staged_slot(StagedCollectives::Kind::kReduceScatter, in, op, in.bytes(), stream)) {
    return launch_site("reduce_scatter", record(describe::reduce_scatter(out, op)), stream, *slot,
                       in, out, in.bytes(), kernels);
  }
  return launch("reduce_scatter", record(describe::reduce_scatter(out, op)), stream, in.bytes(),
                kernels);
}

std::shared_ptr<Work> NcclCommunicator::all_to_all(BufferView in, BufferView out,
                                                   StreamRef stream) {
  validate::all_to_all(in, out, size_, DeviceType::kCuda);
  // One grouped send and receive per peer (the NCCL idiom for all-to-all).
  const std::size_t block = in.count / size_;
  const std::size_t block_bytes = block * dtype_size(in.dtype);
  return launch("all_to_all", record(describe::all_to_all(in)), stream, kNever,
                [&](cudaStream_t s) {
                  NcclApi& api = state_->nccl();
                  ncclResult_t rc = api.group_start();
                  for (int peer = 0; peer < size_ && rc == ncclSuccess; ++peer) {
                    rc = api.send(static_cast<const char*>(in.data) + peer * block_bytes, block,
                                  to_nccl(in.dtype), peer, state_->comm(), s);
                    if (rc == ncclSuccess) {
                      rc = api.recv(static_cast<char*>(out.data) + peer * block_bytes, block,
                                    to_nccl(in.dtype), peer, state_->comm(), s);
                    }
                  }
                  ncclResult_t end = api.group_end();
                  return rc != ncclSuccess ? rc : end;
                });
}

std::shared_ptr<Work> NcclCommunicator::barrier(StreamRef stream) {
  return launch("barrier", record(describe::barrier()), stream, 4, [&](cudaStream_t s) {
    return state_->nccl().all_reduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, state_->comm(),
                                     s);
  });
}

std::shared_ptr<Work> NcclCommunicator::send(BufferView buf, int peer, int tag, StreamRef stream) {
  validate::point_to_point("send", buf, peer, rank_, size_, DeviceType::kCuda);
  return launch("send", 0, stream, kNever, [&](cudaStream_t s) {
    return state_->nccl().send(buf.data, buf.count, to_nccl(buf.dtype), peer, state_->comm(), s);
  });
}

std::shared_ptr<Work> NcclCommunicator::recv(BufferView buf, int peer, int tag, StreamRef stream) {
  validate::point_to_point("recv", buf, peer, rank_, size_, DeviceType::kCuda);
  return launch("recv", 0, stream, kNever, [&](cudaStream_t s) {
    return state_->nccl().recv(buf.data, buf.count, to_nccl(buf.dtype), peer, state_->comm(), s);
  });
}

std::shared_ptr<Work> NcclCommunicator::group(const std::function<void()>& body) {
  if (group_work_) throw Error(ErrorCategory::kInvalidArgument, "group: groups do not nest");
  ++seq_;
  std::string what = "nccl group on rank " + std::to_string(rank_);
  // The end slot goes back unless the group launched (recorded its end).
  struct EndGuard {
    CommState& state;
    EndTicket end;
    bool recorded = false;
    ~EndGuard() {
      if (!recorded) state.drop_end(end);
    }
  } guard{*state_, state_->take_end()};
  auto work = std::make_shared<NcclWork>(state_, guard.end, CallName::of(what));
  group_work_ = work;
  NcclApi& api = state_->nccl();
  ncclResult_t rc = api.group_start();
  if (rc != ncclSuccess) {
    group_work_.reset();
    throw nccl_error(api, state_->comm(), rc, what + ": ncclGroupStart");
  }
  group_calls_.clear();
  try {
    body();
  } catch (...) {
    api.group_end();
    group_work_.reset();
    for (std::uint64_t call : group_calls_) state_->recorder()->completed(call);  // never launched
    group_calls_.clear();
    throw;
  }
  group_work_.reset();
  std::vector<std::uint64_t> calls;
  calls.swap(group_calls_);
  {
    CallWatchdog::Scope scope(*watchdog_, "ncclGroupEnd");
    rc = api.group_end();
  }
  if (watchdog_->fired()) throw_call_failed(rc, what);
  if (rc == ncclInProgress) {
    state_->settle(state_->comm(), what, deadline_after(options_.timeout));
  } else if (rc != ncclSuccess) {
    throw nccl_error(api, state_->comm(), rc, what + ": ncclGroupEnd");
  }
  guard.recorded = true;  // record_end keeps the slot, or frees it if recording fails
  // Its calls forked from the caller's stream: captured with it, if it was.
  if (state_->record_end(guard.end, stream_, CallName::of(what), std::move(calls))) {
    work->set_captured();
  }
  return work;
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  std::string what = "rank " + std::to_string(rank_) + " splitting the NCCL communicator";
  const int split = split_seq_++;  // every rank counts every split, members of a color or not
  ncclConfig_t config = make_config(true);
  ncclComm_t child = nullptr;
  NcclApi& api = state_->nccl();
  ncclResult_t rc;
  {
    CallWatchdog::Scope scope(*watchdog_, "ncclCommSplit");
    rc = api.comm_split(state_->comm(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child,
                        &config);
  }
  if (watchdog_->fired()) throw_call_failed(rc, what);
  if (rc != ncclSuccess && rc != ncclInProgress) throw nccl_error(api, state_->comm(), rc, what);
  state_->settle(state_->comm(), what, deadline_after(options_.timeout));
  if (child == nullptr) return nullptr;
  state_->settle(child, what, deadline_after(options_.timeout));
  // The child's rank and size: the ranks of this color ordered by (key, rank),
  // as NCCL orders them; learned from the child itself.
  int child_rank = 0, child_size = 0;
  if (api.comm_user_rank(child, &child_rank) != ncclSuccess ||
      api.comm_count(child, &child_size) != ncclSuccess) {
    throw Error(ErrorCategory::kBackend, what + ": cannot read the new communicator's rank");
  }
  // The child's keys (flight recorder, copy-engine setup) in a scope of its own.
  NcclOptions sub = options_;
  sub.name = options_.name + "/split" + std::to_string(split) + "/color" + std::to_string(color);
  sub.store = make_prefix_store("split" + std::to_string(split) + "/color" + std::to_string(color),
                                options_.store);
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(FromSplit{}, sub, child, child_rank, child_size));
}

void NcclCommunicator::abort() { state_->abort("abort() called"); }

std::optional<Error> NcclCommunicator::failure() { return state_->failure(); }

void NcclCommunicator::on_failure(std::function<void()> listener) {
  state_->set_failure_listener(std::move(listener));
}

std::shared_ptr<void> NcclCommunicator::allocate_registered(std::size_t bytes) {
  const std::string who = "rank " + std::to_string(rank_);
  if (auto failure = state_->failure()) {
    throw Error(failure->category(), who + " allocating registered memory: " + failure->what(),
                failure->backend_code());
  }
  RTD_CUDA_CHECK(state_->cuda(), state_->cuda().set_device(options_.device),
                 "selecting GPU " + std::to_string(options_.device));
  std::shared_ptr<NcclApi> nccl = options_.nccl;
  void* ptr = nullptr;
  ncclResult_t rc = nccl->mem_alloc(&ptr, bytes);
  if (rc != ncclSuccess || ptr == nullptr) {
    throw nccl_error(*nccl, nullptr, rc,
                     who + ": ncclMemAlloc of " + std::to_string(bytes) + " bytes");
  }
  void* handle = nullptr;
  try {
    handle = state_->register_buffer(ptr, bytes);
  } catch (...) {
    nccl->mem_free(ptr);
    throw;
  }
  std::weak_ptr<CommState> state = state_;
  return std::shared_ptr<void>(ptr, [state, nccl, handle](void* p) {
    if (auto s = state.lock()) s->deregister_buffer(handle);
    nccl->mem_free(p);
  });
}

}  // namespace rtd::nccl

namespace rtd::nccl {

CeSetup NcclCommunicator::ce_setup(std::vector<BufferView> buffers, ReduceOp op,
                                   Store* store) const {
  return CeSetup{.state = state_,
                 .store = store,
                 .rank = rank_,
                 .size = size_,
                 .device = options_.device,
                 .buffers = std::move(buffers),
                 .op = op,
                 .timeout = options_.timeout,
                 .reduce_blocks = options_.settings.ce_reduce_blocks,
                 .copy_streams = options_.settings.ce_copy_streams};
}

std::unique_ptr<PersistentAllReduce> NcclCommunicator::persistent_all_reduce(
    std::vector<BufferView> buffers, ReduceOp op, PersistentOptions options) {
  if (options.copy_engines && size_ > 1) {
    auto store = make_prefix_store("ce/" + std::to_string(persistent_seq_++), options_.store);
    std::string why;
    if (auto ce = CopyEngineAllReduce::create(ce_setup(buffers, op, store.get()), &why)) {
      log::get("nccl")->info("rank {}: {} buffers reduced by copy engines", rank_, buffers.size());
      return ce;
    }
    log::get("nccl")->info("rank {}: copy-engine all-reduce not used: {}", rank_, why);
  }
  return Communicator::persistent_all_reduce(std::move(buffers), op, options);
}

std::unique_ptr<PersistentShardCollective> NcclCommunicator::persistent_shard_collective(
    std::vector<BufferView> sources, bool gather, ReduceOp op, PersistentOptions options) {
  const char* name = gather ? "all-gather" : "reduce-scatter";
  if (options.copy_engines && size_ > 1) {
    auto store = make_prefix_store("ce/" + std::to_string(persistent_seq_++), options_.store);
    std::string why;
    if (auto ce =
            CopyEngineShardCollective::create(ce_setup(sources, op, store.get()), gather, &why)) {
      log::get("nccl")->info("rank {}: {} out of {} sources by copy engines", rank_, name,
                             sources.size());
      return ce;
    }
    log::get("nccl")->info("rank {}: copy-engine {} not used: {}", rank_, name, why);
  }
  return gather ? Communicator::persistent_all_gather(std::move(sources), options)
                : Communicator::persistent_reduce_scatter(std::move(sources), op, options);
}

std::unique_ptr<PersistentShardCollective> NcclCommunicator::persistent_all_gather(
    std::vector<BufferView> sources, PersistentOptions options) {
  return persistent_shard_collective(std::move(sources), true, ReduceOp::kSum, options);
}

std::unique_ptr<PersistentShardCollective> NcclCommunicator::persistent_reduce_scatter(
    std::vector<BufferView> sources, ReduceOp op, PersistentOptions options) {
  return persistent_shard_collective(std::move(sources), false, op, options);
}

}  // namespace rtd::nccl
