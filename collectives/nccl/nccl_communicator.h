// NcclCommunicator: the GPU backend. Bootstraps through our Store, creates a
// nonblocking NCCL communicator on the rank's device, and runs each operation
// on its own stream ordered after the caller's stream ([Stream order], work.h).
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "collectives/nccl/call_watchdog.h"
#include "collectives/nccl/ce_peers.h"
#include "collectives/nccl/comm_state.h"
#include "collectives/nccl/staged_collectives.h"
#include "rt_dist/communicator.h"
#include "rt_dist/context.h"
#include "rt_dist/store.h"

namespace rtd::nccl {

struct NcclOptions {
  std::shared_ptr<Store> store;  // scoped to this communicator
  std::string name = "default";  // in messages
  int rank = 0;
  int size = 1;
  int device = 0;
  std::chrono::milliseconds timeout{300'000};
  FlightOptions flight;  // the flight recorder's live warning and dump
  NcclSettings settings;
  std::shared_ptr<NcclApi> nccl;  // real ones when null
  std::shared_ptr<CudaApi> cuda;
};

// 64-byte aligned, so that what every call reads of it (below) fills the
// line of its vtable pointer and one more.
class alignas(64) NcclCommunicator : public Communicator {
 public:
  // Collective: every rank constructs it with the same store and size. Fails
  // with kTimeout (and aborts) if the communicator is not ready within timeout.
  explicit NcclCommunicator(NcclOptions options);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  using Communicator::all_reduce;  // the in-place form
  std::shared_ptr<Work> all_reduce(BufferView in, BufferView out, ReduceOp op,
                                   StreamRef stream) override;
  std::shared_ptr<Work> broadcast(BufferView buf, int root, StreamRef stream) override;
  std::shared_ptr<Work> all_gather(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> reduce_scatter(BufferView in, BufferView out, ReduceOp op,
                                       StreamRef stream) override;
  std::shared_ptr<Work> all_to_all(BufferView in, BufferView out, StreamRef stream) override;
  std::shared_ptr<Work> barrier(StreamRef stream) override;
  std::shared_ptr<Work> send(BufferView buf, int peer, int tag, StreamRef stream) override;
  std::shared_ptr<Work> recv(BufferView buf, int peer, int tag, StreamRef stream) override;
  std::shared_ptr<Work> group(const std::function<void()>& body) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void abort() override;
  std::optional<Error> failure() override;
  void on_failure(std::function<void()> listener) override;
  std::shared_ptr<void> allocate_registered(std::size_t bytes) override;
  // Copy engines (ce_all_reduce.h) when every rank is on one host with peer
  // access and options.copy_engines; else one all_reduce per run.
  std::unique_ptr<PersistentAllReduce> persistent_all_reduce(std::vector<BufferView> buffers,
                                                             ReduceOp op,
                                                             PersistentOptions options) override;
  std::unique_ptr<PersistentShardCollective> persistent_all_gather(
      std::vector<BufferView> sources, PersistentOptions options) override;
  std::unique_ptr<PersistentShardCollective> persistent_reduce_scatter(
      std::vector<BufferView> sources, ReduceOp op, PersistentOptions options) override;

  // The communicator's own stream: every operation reads and writes the
  // caller's buffers there (the staged copy-engine collectives included),
  // except those that settings.inline_bytes runs on the caller's stream.
  StreamRef stream() const override { return StreamRef{stream_}; }
  // Operations launched and not yet seen complete (for tests).
  std::size_t in_flight() const { return state_->in_flight(); }
  // The largest call that runs on the caller's stream (settings.inline_bytes; 0: none).
  long long inline_bytes() const { return static_cast<long long>(inline_bytes_); }
  // NCCL's communicator under this one (a benchmark times raw NCCL calls on it).
  ncclComm_t native_comm() const { return state_->comm(); }

 private:
  struct FromSplit {};
  NcclCommunicator(FromSplit, const NcclOptions& options, ncclComm_t comm, int rank, int size);
  void create_stream_and_scratch();
  // NCCL's operation for op on this communicator (a one-rank average is a sum).
  ncclRedOp_t reduction(ReduceOp op) const;
  // Orders the comm stream after the caller's, makes the NCCL call, and (outside
  // a group) records the end event (CommState::record_end, which also tells
  // whether a CUDA graph captured the call). call(stream) returns the ncclResult_t.
  // recorded: the operation's number in the flight recorder (0: not recorded).
  // bytes: the call's payload, which decides whether it runs on the caller's
  // stream (settings.inline_bytes); kNever: never there.
  static constexpr std::size_t kNever = static_cast<std::size_t>(-1);
  template <typename Call>
  std::shared_ptr<Work> launch(const char* op, std::uint64_t recorded, StreamRef caller,
                               std::size_t bytes, Call&& call);
  // The staged collective for a call, or nullptr where it goes to NCCL: in a
  // group, below StagedCollectives::kMinBytes, or captured into a CUDA graph
  // (the copy engines' flags count calls on the host, which a replay of the
  // graph would not).
  // Inline: without staged collectives (the usual case) a call pays one test,
  // not a call into another stretch of code.
  StagedCollectives::Slot* staged_slot(StagedCollectives::Kind kind, const BufferView& in,
                                       ReduceOp op, std::size_t moved_bytes, StreamRef stream) {
    if (!staged_) [[likely]]
      return nullptr;
    return staged_slot_for(kind, in, op, moved_bytes, stream);
  }
  StagedCollectives::Slot* staged_slot_for(StagedCollectives::Kind kind, const BufferView& in,
                                           ReduceOp op, std::size_t moved_bytes, StreamRef stream);
  // launch() of a call at a staged site: by copy engines (StagedCollectives::run)
  // or by `kernels`, as the site's MethodChoice says, timed while it measures.
  template <typename Call>
  std::shared_ptr<Work> launch_site(const char* op, std::uint64_t recorded, StreamRef caller,
                                    StagedCollectives::Slot& slot, const BufferView& in,
                                    const BufferView& out, std::size_t bytes, Call&& kernels);
  // The end of a site's measurement: its timings summed over the ranks (an
  // NCCL all-reduce on the communicator's stream, waited for).
  void agree(MethodChoice::Sums& sums);
  // launch()'s paths off the usual one (out of line): refuse the call if the
  // communicator failed; note both streams in the flight recorder (traced);
  // order the communicator's stream after the caller's; settle an
  // ncclInProgress answer, or throw for any other failure; add the call to
  // the group and return the group's Work.
  void refuse_if_failed(const CallName& name);
  void annotate_streams(std::uint64_t recorded, cudaStream_t run_on, cudaStream_t caller_stream);
  void order_after_caller(cudaStream_t caller_stream, const CallName& name);
  void settle_or_throw(ncclResult_t rc, const CallName& name);
  std::shared_ptr<Work> join_group(std::uint64_t recorded);
  std::uint64_t record(const CallDescription& call) { return state_->record(call); }
  CeSetup ce_setup(std::vector<BufferView> buffers, ReduceOp op, Store* store) const;
  std::unique_ptr<PersistentShardCollective> persistent_shard_collective(
      std::vector<BufferView> sources, bool gather, ReduceOp op, PersistentOptions options);
  // blocking=false for init (polled against the deadline); true for the data path.
  ncclConfig_t make_config(bool blocking) const;
  // The data-path communicator, into state_, and the watchdog started: split
  // off a nonblocking init communicator (returns the split's milliseconds), or
  // made directly (settings.direct_init).
  double init_and_split(const ncclUniqueId& id, const std::string& who,
                        std::chrono::steady_clock::time_point deadline);
  void init_directly(const ncclUniqueId& id, const std::string& who,
                     std::chrono::steady_clock::time_point deadline);
  void start_watchdog();
  // Marks in the store that this rank reached NCCL's init; missing_at_init()
  // names, after an init timed out, the ranks that never did.
  void mark_arrival();
  std::string missing_at_init();
  void start_recorder();  // the flight recorder, kept in state_ (its Works diagnose through it)
  [[noreturn]] void throw_call_failed(ncclResult_t rc, const std::string& what);

  // What every call reads, first: after NCCL's call each cache line the
  // path touches again is a miss.
  std::shared_ptr<CommState> state_;
  std::uint64_t seq_ = 0;
  int rank_;
  int size_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;  // recorded on the caller's stream before each call
  std::unique_ptr<CallWatchdog> watchdog_;
  std::size_t inline_bytes_;  // settings.inline_bytes (0: none)
  // Inside group(): the group's Work, returned by every operation.
  std::shared_ptr<Work> group_work_;
  // all_reduce, all_gather and reduce_scatter by copy engines through staging
  // buffers (settings.staged_copy_engines).
  std::unique_ptr<StagedCollectives> staged_;
  std::unique_ptr<SiteAgreement> agreement_;  // made at the first measurement's end

  NcclOptions options_;
  void* scratch_ = nullptr;                 // 4 bytes for barrier()
  int split_seq_ = 0;                       // splits so far (store scopes)
  int persistent_seq_ = 0;                  // persistent collectives set up so far (store scopes)
  std::uint64_t in_progress_ = 0;           // calls answered ncclInProgress (then settled)
  std::chrono::nanoseconds settling_{0};    // host time spent settling them
  std::vector<std::uint64_t> group_calls_;  // the group's recorded collectives
};

}  // namespace rtd::nccl
