// CePeers: set-up of the copy-engine collectives (share memory through the
// store), and CeCall: the steps of one call.
#include "collectives/nccl/ce_peers.h"

#include <map>
#include <thread>

#include "collectives/nccl/ce_chunks.h"
#include "collectives/nccl/ce_setup_info.h"
#include "collectives/nccl/driver_api.h"
#include "collectives/nccl/nccl_check.h"
#include "collectives/nccl/nccl_work.h"
#include "runtime/core/log.h"

namespace rtd::nccl {
namespace {

// Every rank publishes `mine` under key/<rank> and reads everyone's.
std::vector<std::string> all_gather_strings(Store& store, const std::string& key, int rank,
                                            int size, const std::string& mine,
                                            std::chrono::milliseconds timeout) {
  store.set(key + "/" + std::to_string(rank), mine);
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) all.push_back(store.get(key + "/" + std::to_string(r), timeout));
  return all;
}

// What a traced copy or addition shows: its call, its step and its size.
std::string span_detail(const std::string& what, const char* step, std::size_t bytes) {
  return what + ": " + step + ", " + std::to_string(bytes) + " bytes";
}

// Waits for work queued on stream without cuda*Synchronize (polls an event);
// what failed, if anything did (the work itself, or the event).
// Gives up with cudaErrorNotReady at deadline (a peer's flag that never came).
cudaError_t drain(cudaStream_t stream, std::chrono::steady_clock::time_point deadline =
                                           std::chrono::steady_clock::time_point::max()) {
  cudaEvent_t e = nullptr;
  cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (rc != cudaSuccess) return rc;
  rc = cudaEventRecord(e, stream);
  if (rc == cudaSuccess) {
    while ((rc = cudaEventQuery(e)) == cudaErrorNotReady &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  }
  cudaEventDestroy(e);
  return rc;
}

}  // namespace

std::string reduce_refusal(const CeSetup& setup) {
  if (setup.op != ReduceOp::kSum && setup.op != ReduceOp::kAvg) return "op is not sum or average";
  for (const BufferView& b : setup.buffers) {
    if (!is_float_type(b.dtype)) return "dtype not float32, bfloat16 or float16";
  }
  return "";
}

CePeers::~CePeers() {
  spans_.reset();  // hands the last calls' copies to the trace (waiting for them to end)
  cudaSetDevice(device_);
  // The host may be far ahead of the GPU: copies still queued read and write
  // the peers' memory through the mappings. Drained first (bounded by the
  // timeout: a peer gone mid-call never raises its flag); where they cannot
  // be drained the mappings are left open, not pulled from under them.
  if (const cudaError_t rc = drain_all(); rc != cudaSuccess) {
    log::get("nccl")->error(
        "copy engines of rank {}: queued copies did not drain ({}); leaving the peers' "
        "mappings open",
        rank_, rc == cudaErrorNotReady ? "still running at the timeout" : cudaGetErrorString(rc));
    opened_.clear();
  }
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
  if (flags_) cudaFree(flags_);
  if (scratch_) cudaFree(scratch_);
  if (start_) cudaEventDestroy(start_);
  if (fork_) cudaEventDestroy(fork_);
  for (cudaEvent_t e : joins_) cudaEventDestroy(e);
  for (cudaStream_t p : copies_) cudaStreamDestroy(p);
  if (stream_) cudaStreamDestroy(stream_);
  if (release_stream_) cudaStreamDestroy(release_stream_);
}

cudaError_t CePeers::drain_all() {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  cudaError_t first = cudaSuccess;
  auto one = [&](cudaStream_t s) {
    if (s == nullptr) return;
    const cudaError_t rc = drain(s, deadline);
    if (first == cudaSuccess) first = rc;
  };
  for (cudaStream_t s : copies_) one(s);
  one(stream_);
  one(release_stream_);
  return first;
}

bool CePeers::buffers_unchanged() const {
  for (const auto& [data, id] : own_ids_) {
    if (id == 0 || allocation_id(data) != id) return false;
  }
  return true;
}

void CePeers::release_waits() {
  cudaSetDevice(device_);
  // 0x7f7f7f7f: at or past any epoch in the waits' wrap-around order (a
  // signed difference), where 0xffffffff would read as behind.
  const cudaError_t rc =
      cudaMemsetAsync(flags_, 0x7f, flag_count_ * sizeof(unsigned), release_stream_);
  if (rc != cudaSuccess) {
    // The waits then end only with the process; the abort that called this says why it came.
    log::get("nccl")->error("copy engines: releasing the waits of an aborted call failed: {}",
                            cudaGetErrorString(rc));
  }
}

std::shared_ptr<CePeers> CePeers::create(const CeSetup& setup, const std::string& refusal,
                                         int flag_slots, std::size_t scratch_bytes,
                                         std::string* why) {
  const int nbuf = static_cast<int>(setup.buffers.size());
  // Round 0, before allocating anything: are all ranks on one host?
  const std::string host = host_name();
  auto hosts =
      all_gather_strings(*setup.store, "host", setup.rank, setup.size, host, setup.timeout);
  for (int r = 0; r < setup.size; ++r) {
    if (hosts[r] != host) {
      *why = "ranks on more than one host (" + host + ", " + hosts[r] + ")";
      return nullptr;
    }
  }
  std::shared_ptr<CePeers> res(new CePeers());
  res->device_ = setup.device;
  res->rank_ = setup.rank;
  res->size_ = setup.size;
  res->flag_slots_ = flag_slots;
  res->timeout_ = setup.timeout;
  RankInfo mine;
  mine.ok = true;
  auto refuse = [&](const std::string& reason) {
    if (mine.ok) mine.why = reason;
    mine.ok = false;
  };
  if (!refusal.empty()) refuse(refusal);
  const DriverApi& driver = driver_api();
  if (!driver.missing.empty()) refuse("CUDA driver entry points missing: " + driver.missing);
  if (cudaSetDevice(setup.device) != cudaSuccess) refuse("cannot select the GPU");
  for (const BufferView& b : setup.buffers) {
    if (!mine.ok) break;
    if (b.device != DeviceType::kCuda) {
      refuse("a buffer is not on the GPU");
      break;
    }
    CUdeviceptr base = 0;
    size_t alloc_bytes = 0;
    cudaIpcMemHandle_t handle{};
    if (driver.mem_get_address_range(&base, &alloc_bytes, reinterpret_cast<CUdeviceptr>(b.data)) !=
            CUDA_SUCCESS ||
        cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)) != cudaSuccess) {
      cudaGetLastError();
      refuse("a buffer's memory cannot be shared between processes (cudaIpcGetMemHandle)");
      break;
    }
    mine.handles.push_back(hex(&handle, sizeof(handle)));
    res->own_ids_.emplace_back(b.data, allocation_id(b.data));
    mine.offsets.push_back(reinterpret_cast<CUdeviceptr>(b.data) - base);
    mine.counts.push_back(b.count);
    mine.dtypes.push_back(static_cast<int>(b.dtype));
  }
  if (mine.ok) {
    res->flag_count_ = std::size_t(flag_slots) * setup.size;
    cudaIpcMemHandle_t flags_handle{};
    bool streams_ok = true;
    for (int k = 0; k < (setup.copy_streams > 1 ? setup.copy_streams : 0) && streams_ok; ++k) {
      cudaStream_t s = nullptr;
      cudaEvent_t e = nullptr;
      streams_ok = setup.state->cuda().stream_create(&s, true) == cudaSuccess;
      if (streams_ok) res->copies_.push_back(s);
      streams_ok = streams_ok && setup.state->cuda().event_create(&e) == cudaSuccess;
      if (streams_ok) res->joins_.push_back(e);
    }
    if (!streams_ok ||
        cudaMalloc(reinterpret_cast<void**>(&res->flags_),
                   std::max<std::size_t>(1, res->flag_count_) * sizeof(unsigned)) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&res->scratch_),
                   std::max<std::size_t>(16, scratch_bytes)) != cudaSuccess ||
        cudaIpcGetMemHandle(&flags_handle, res->flags_) != cudaSuccess ||
        setup.state->cuda().stream_create(&res->stream_, true) != cudaSuccess ||
        setup.state->cuda().stream_create(&res->release_stream_, true) != cudaSuccess ||
        setup.state->cuda().event_create(&res->start_) != cudaSuccess ||
        setup.state->cuda().event_create(&res->fork_) != cudaSuccess) {
      cudaGetLastError();
      refuse("allocating its flags, scratch or streams failed");
    } else if (cudaError_t rc = cudaMemsetAsync(res->flags_, 0, res->flag_count_ * sizeof(unsigned),
                                                res->stream_);
               rc != cudaSuccess || (rc = drain(res->stream_)) != cudaSuccess) {
      cudaGetLastError();  // zero before any peer can write them, or refuse
      refuse(std::string("zeroing its flags failed: ") + cudaGetErrorString(rc));
    } else {
      mine.flags_handle = hex(&flags_handle, sizeof(flags_handle));
      res->spans_ = DeviceSpans::create_if_tracing(setup.device);
    }
  }

  // Round 1: can every rank take part, with the same buffers?
  auto infos = all_gather_strings(*setup.store, "info", setup.rank, setup.size, mine.encode(),
                                  setup.timeout);
  std::vector<RankInfo> all;
  for (const auto& text : infos) all.push_back(RankInfo::decode(text));
  for (int r = 0; r < setup.size; ++r) {
    const RankInfo& o = all[r];
    std::string reason;
    if (!o.ok)
      reason = "rank " + std::to_string(r) + ": " + o.why;
    else if (o.counts != all[0].counts || o.dtypes != all[0].dtypes)
      reason = "ranks passed different buffers";
    if (!reason.empty()) {
      *why = reason;
      return nullptr;
    }
  }

  // Round 2: map every peer's flags and buffers.
  res->peer_flags_.assign(setup.size, nullptr);
  res->peer_buffers_.assign(setup.size, std::vector<char*>(nbuf, nullptr));
  std::map<std::string, char*> mapped;  // handle -> base here (one mapping per allocation)
  std::string open_error;
  auto open = [&](const std::string& text) -> char* {
    auto it = mapped.find(text);
    if (it != mapped.end()) return it->second;
    cudaIpcMemHandle_t handle{};
    void* p = nullptr;
    if (!unhex(text, &handle, sizeof(handle)) ||
        cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      open_error = cudaGetErrorString(cudaGetLastError());
      return nullptr;
    }
    res->opened_.push_back(p);
    return mapped[text] = static_cast<char*>(p);
  };
  for (int r = 0; r < setup.size && open_error.empty(); ++r) {
    if (r == setup.rank) continue;
    res->peer_flags_[r] = open(all[r].flags_handle);
    for (int i = 0; i < nbuf && open_error.empty(); ++i) {
      char* base = open(all[r].handles[i]);
      if (base) res->peer_buffers_[r][i] = base + all[r].offsets[i];
    }
  }
  auto opened = all_gather_strings(*setup.store, "open", setup.rank, setup.size,
                                   open_error.empty() ? "ok" : open_error, setup.timeout);
  for (int r = 0; r < setup.size; ++r) {
    if (opened[r] != "ok") {
      *why = "rank " + std::to_string(r) + " cannot map its peers' memory (" + opened[r] + ")";
      return nullptr;
    }
  }
  std::weak_ptr<CePeers> weak = res;
  setup.state->on_abort([weak] {
    if (auto r = weak.lock()) r->release_waits();
  });
  return res;
}

CeCall::CeCall(CePeers& peers, std::shared_ptr<CommState> state, const std::string& op,
               std::string args, const std::string& name, const std::string& detail,
               unsigned& epoch)
    : peers_(peers),
      state_(std::move(state)),
      number_(state_->record(op, std::move(args))),
      unlaunched_(state_->recorder(), number_),
      what_(name + " #" + std::to_string(number_) + detail + " on rank " +
            std::to_string(peers.rank())) {
  if (auto failure = state_->failure()) {
    throw Error(failure->category(), what_ + ": " + failure->what(), failure->backend_code());
  }
  epoch_ = ++epoch;
  if (peers_.spans_) peers_.spans_->collect();  // the earlier calls' finished spans
}

namespace {
void check_cu(CUresult rc, const std::string& what, const char* step) {
  if (rc != CUDA_SUCCESS) {
    throw Error(ErrorCategory::kBackend,
                what + ": " + step + " failed (CUDA driver error " + std::to_string(rc) + ")",
                static_cast<int>(rc));
  }
}
}  // namespace

void CeCall::start_after(StreamRef caller) {
  CudaApi& cuda = state_->cuda();
  const auto caller_stream = static_cast<cudaStream_t>(caller.cuda_stream);
  if (state_->capturing(caller_stream, CallName::of(what_))) {
    throw Error(ErrorCategory::kInvalidArgument,
                what_ +
                    ": a copy-engine collective cannot be captured into a CUDA graph (its "
                    "flags count calls on the host, which a replay of the graph would not); "
                    "inside a capture use the communicator's collectives, which go to NCCL "
                    "there, or make this one with copy_engines = false");
  }
  RTD_CUDA_CHECK(cuda, cudaSetDevice(peers_.device_), what_ + ": selecting the GPU");
  RTD_CUDA_CHECK(cuda, cudaEventRecord(peers_.start_, caller_stream),
                 what_ + ": recording on the caller's stream");
  RTD_CUDA_CHECK(cuda, cudaStreamWaitEvent(peers_.stream_, peers_.start_, 0),
                 what_ + ": ordering after the caller's stream");
}

void CeCall::tell_peers(int slot) {
  const int n = peers_.size_, me = peers_.rank_;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    auto addr = reinterpret_cast<CUdeviceptr>(peers_.peer_flags_[p] +
                                              (std::size_t(slot) * n + me) * sizeof(unsigned));
    check_cu(driver_api().stream_write_value32(peers_.stream_, addr, epoch_,
                                               CU_STREAM_WRITE_VALUE_DEFAULT),
             what_, "signalling a peer");
  }
}

void CeCall::wait_for(int slot, int peer, cudaStream_t on) {
  auto addr =
      reinterpret_cast<CUdeviceptr>(peers_.flags_ + std::size_t(slot) * peers_.size_ + peer);
  check_cu(driver_api().stream_wait_value32(on, addr, epoch_, CU_STREAM_WAIT_VALUE_GEQ), what_,
           "waiting for a peer");
}

void CeCall::wait_for_all(int slot) {
  for (int p = 0; p < peers_.size_; ++p) {
    if (p != peers_.rank_) wait_for(slot, p, peers_.stream_);
  }
}

void CeCall::copy_with_peers(int wait_slot, const Where& dst, const Where& src, const Bytes& bytes,
                             const char* step) {
  CudaApi& cuda = state_->cuda();
  const int n = peers_.size_, me = peers_.rank_;
  cudaStream_t s = peers_.stream_;
  // With copy streams, `s` forks to them, the copies (in `parts` pieces per
  // peer) spread over them, and `s` joins them all; without, they run on `s`.
  const bool forked = !peers_.copies_.empty();
  const int streams = forked ? static_cast<int>(peers_.copies_.size()) : 1;
  const int parts = std::max(1, streams / std::max(1, n - 1));
  if (forked)
    RTD_CUDA_CHECK(cuda, cudaEventRecord(peers_.fork_, s), what_ + ": forking to the copies");
  std::vector<bool> used(streams, false);
  for (int turn = 1, k = 0; turn < n; ++turn) {
    const int p = (me + turn) % n;
    for (int j = 0; j < parts; ++j, ++k) {
      const BytePiece piece = piece_of(bytes(p), parts, j);
      const std::size_t from = piece.first, len = piece.last - piece.first;
      cudaStream_t on = forked ? peers_.copies_[k % streams] : s;
      if (forked && !used[k % streams]) {
        RTD_CUDA_CHECK(cuda, cudaStreamWaitEvent(on, peers_.fork_, 0),
                       what_ + ": ordering a copy after the collective's stream");
        used[k % streams] = true;
      }
      if (wait_slot >= 0) wait_for(wait_slot, p, on);
      if (len == 0) continue;
      DeviceSpans* spans = peers_.spans_.get();
      const DeviceSpans::Mark mark = spans ? spans->begin(on) : DeviceSpans::Mark{};
      RTD_CUDA_CHECK(
          cuda, cudaMemcpyAsync(dst(p) + from, src(p) + from, len, cudaMemcpyDeviceToDevice, on),
          what_ + ": " + step);
      if (spans) {
        spans->end(mark, on, "copy with rank " + std::to_string(p),
                   forked ? "copy stream " + std::to_string(k % streams) : "copy engines",
                   span_detail(what_, step, len));
      }
    }
  }
  for (int k = 0; forked && k < streams; ++k) {
    if (!used[k]) continue;
    RTD_CUDA_CHECK(cuda, cudaEventRecord(peers_.joins_[k], peers_.copies_[k]),
                   what_ + ": recording a copy's end");
    RTD_CUDA_CHECK(cuda, cudaStreamWaitEvent(s, peers_.joins_[k], 0),
                   what_ + ": joining the copies");
  }
}

void CeCall::copy_local(void* dst, const void* src, std::size_t bytes, const char* step) {
  if (bytes == 0 || dst == src) return;
  RTD_CUDA_CHECK(state_->cuda(),
                 cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, peers_.stream_),
                 what_ + ": " + step);
}

DeviceSpans::Mark CeCall::mark() {
  return peers_.spans_ ? peers_.spans_->begin(peers_.stream_) : DeviceSpans::Mark{};
}

void CeCall::span(const DeviceSpans::Mark& from, const char* name, std::size_t bytes) {
  if (peers_.spans_)
    peers_.spans_->end(from, peers_.stream_, name, "copy engines", span_detail(what_, name, bytes));
}

void CeCall::check_launch(const char* step) { check_result(cudaGetLastError(), step); }

void CeCall::check_result(cudaError_t rc, const char* step) {
  RTD_CUDA_CHECK(state_->cuda(), rc, what_ + ": " + step);
}

std::shared_ptr<Work> CeCall::finish() {
  const EndTicket end = state_->record_end(peers_.stream_, CallName::of(what_, number_));
  unlaunched_.launched();
  return std::make_shared<NcclWork>(state_, end, CallName::of(what_, number_));
}

}  // namespace rtd::nccl
