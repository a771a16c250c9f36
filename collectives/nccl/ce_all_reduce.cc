// CopyEngineAllReduce: setup (share memory through the store), run, teardown.
#include "collectives/nccl/ce_all_reduce.h"

#include <cuda_runtime_api.h>

#include <map>
#include <thread>

#include "collectives/nccl/ce_chunks.h"
#include "collectives/nccl/ce_kernels.h"
#include "collectives/nccl/ce_setup_info.h"
#include "collectives/nccl/driver_api.h"
#include "collectives/nccl/nccl_check.h"
#include "collectives/nccl/nccl_work.h"
#include "runtime/core/log.h"

namespace rtd::nccl {
namespace {

enum FlagKind { kFinal = 0, kReduced = 1, kFlagKinds = 2 };
constexpr int kNoWait = -1;

// Every rank publishes `mine` under key/<rank> and reads everyone's.
std::vector<std::string> all_gather_strings(Store& store, const std::string& key, int rank,
                                            int size, const std::string& mine,
                                            std::chrono::milliseconds timeout) {
  store.set(key + "/" + std::to_string(rank), mine);
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) all.push_back(store.get(key + "/" + std::to_string(r), timeout));
  return all;
}

// Streams of the copies besides the reducer's own: none for one (the copies
// then run on the reducer's stream itself, with no fork or join).
int extra_copy_streams(const CeSetup& setup) {
  return setup.copy_streams > 1 ? setup.copy_streams : 0;
}

// Waits for work queued on stream without cuda*Synchronize (polls an event).
void drain(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return;
  cudaEventRecord(e, stream);
  while (cudaEventQuery(e) == cudaErrorNotReady) std::this_thread::yield();
  cudaEventDestroy(e);
}

}  // namespace

// Everything the reducer owns on the device; shared with the abort hook,
// which releases the waits by raising every flag.
struct CopyEngineAllReduce::Resources {
  int device = 0;
  cudaStream_t stream = nullptr;          // the reducer's stream (highest priority)
  cudaStream_t release_stream = nullptr;  // for the abort hook's flag raise
  cudaEvent_t start = nullptr;            // recorded on the caller's stream
  cudaEvent_t fork = nullptr;             // recorded on `stream`, awaited by the copy streams
  std::vector<cudaStream_t> copies;       // the copy streams (none: `stream` copies)
  std::vector<cudaEvent_t> joins;         // per copy stream, awaited by `stream`
  unsigned* flags = nullptr;              // [kind][buffer][from rank]
  std::size_t flag_count = 0;
  char* scratch = nullptr;                       // (size - 1) slots of the largest chunk
  std::vector<char*> peer_flags;                 // per rank (own: nullptr): its flags, mapped here
  std::vector<std::vector<char*>> peer_buffers;  // [rank][buffer]: mapped here
  std::vector<void*> opened;                     // IPC mappings to close

  ~Resources() {
    cudaSetDevice(device);
    for (void* p : opened) cudaIpcCloseMemHandle(p);
    if (flags) cudaFree(flags);
    if (scratch) cudaFree(scratch);
    if (start) cudaEventDestroy(start);
    if (fork) cudaEventDestroy(fork);
    for (cudaEvent_t e : joins) cudaEventDestroy(e);
    for (cudaStream_t p : copies) cudaStreamDestroy(p);
    if (stream) cudaStreamDestroy(stream);
    if (release_stream) cudaStreamDestroy(release_stream);
  }
  void release_waits() {
    cudaSetDevice(device);
    // 0x7f7f7f7f: at or past any epoch in the waits' wrap-around order (a
    // signed difference), where 0xffffffff would read as behind.
    cudaMemsetAsync(flags, 0x7f, flag_count * sizeof(unsigned), release_stream);
  }
};

namespace {
bool create_copy_streams(CommState& state, int count, CopyEngineAllReduce::Resources* res) {
  for (int k = 0; k < count; ++k) {
    cudaStream_t s = nullptr;
    cudaEvent_t e = nullptr;
    if (state.cuda().stream_create(&s) != cudaSuccess) return false;
    res->copies.push_back(s);
    if (state.cuda().event_create(&e) != cudaSuccess) return false;
    res->joins.push_back(e);
  }
  return true;
}
}  // namespace

std::unique_ptr<CopyEngineAllReduce> CopyEngineAllReduce::create(const CeSetup& setup,
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
  auto res = std::make_shared<Resources>();
  res->device = setup.device;
  RankInfo mine;
  mine.ok = true;
  auto refuse = [&](const std::string& reason) {
    if (mine.ok) mine.why = reason;
    mine.ok = false;
  };
  const DriverApi& driver = driver_api();
  if (setup.op != ReduceOp::kSum && setup.op != ReduceOp::kAvg) refuse("op is not sum or average");
  if (!driver.missing.empty()) refuse("CUDA driver entry points missing: " + driver.missing);
  if (cudaSetDevice(setup.device) != cudaSuccess) refuse("cannot select the GPU");
  std::size_t max_slot_bytes = 0;
  for (const BufferView& b : setup.buffers) {
    if (!mine.ok) break;
    if (b.device != DeviceType::kCuda) refuse("a buffer is not on the GPU");
    if (b.dtype != DType::kFloat32 && b.dtype != DType::kBFloat16) refuse("dtype not f32/bf16");
    if (!mine.ok) break;
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
    mine.offsets.push_back(reinterpret_cast<CUdeviceptr>(b.data) - base);
    mine.counts.push_back(b.count);
    mine.dtypes.push_back(static_cast<int>(b.dtype));
    const std::size_t slot = ChunkLayout(b.count, setup.size, dtype_size(b.dtype)).slot_elems();
    max_slot_bytes = std::max(max_slot_bytes, slot * dtype_size(b.dtype));
  }
  if (mine.ok) {
    res->flag_count = std::size_t(kFlagKinds) * nbuf * setup.size;
    cudaIpcMemHandle_t flags_handle{};
    if (cudaMalloc(reinterpret_cast<void**>(&res->flags), res->flag_count * sizeof(unsigned)) !=
            cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&res->scratch),
                   std::max<std::size_t>(1, (setup.size - 1) * max_slot_bytes)) != cudaSuccess ||
        cudaIpcGetMemHandle(&flags_handle, res->flags) != cudaSuccess ||
        setup.state->cuda().stream_create(&res->stream) != cudaSuccess ||
        setup.state->cuda().stream_create(&res->release_stream) != cudaSuccess ||
        setup.state->cuda().event_create(&res->start) != cudaSuccess ||
        setup.state->cuda().event_create(&res->fork) != cudaSuccess ||
        !create_copy_streams(*setup.state, extra_copy_streams(setup), res.get())) {
      cudaGetLastError();
      refuse("allocating its flags, scratch or streams failed");
    } else {
      cudaMemsetAsync(res->flags, 0, res->flag_count * sizeof(unsigned), res->stream);
      drain(res->stream);  // zero before any peer can write them
      mine.flags_handle = hex(&flags_handle, sizeof(flags_handle));
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
  res->peer_flags.assign(setup.size, nullptr);
  res->peer_buffers.assign(setup.size, std::vector<char*>(nbuf, nullptr));
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
    res->opened.push_back(p);
    return mapped[text] = static_cast<char*>(p);
  };
  for (int r = 0; r < setup.size && open_error.empty(); ++r) {
    if (r == setup.rank) continue;
    res->peer_flags[r] = open(all[r].flags_handle);
    for (int i = 0; i < nbuf && open_error.empty(); ++i) {
      char* base = open(all[r].handles[i]);
      if (base) res->peer_buffers[r][i] = base + all[r].offsets[i];
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
  std::weak_ptr<Resources> weak = res;
  setup.state->on_abort([weak] {
    if (auto r = weak.lock()) r->release_waits();
  });
  return std::unique_ptr<CopyEngineAllReduce>(new CopyEngineAllReduce(setup, std::move(res)));
}

CopyEngineAllReduce::CopyEngineAllReduce(const CeSetup& setup, std::shared_ptr<Resources> res)
    : setup_(setup), res_(std::move(res)), epoch_(setup.buffers.size(), 0) {
  setup_.store = nullptr;  // used only during setup
}

CopyEngineAllReduce::~CopyEngineAllReduce() = default;

std::shared_ptr<Work> CopyEngineAllReduce::run(int i, StreamRef caller) {
  const int nbuf = static_cast<int>(setup_.buffers.size());
  if (i < 0 || i >= nbuf) {
    throw Error(ErrorCategory::kInvalidArgument,
                "PersistentAllReduce::run: no buffer " + std::to_string(i));
  }
  const std::uint64_t call = setup_.state->record(
      "persistent_all_reduce", call_args(setup_.buffers[i], "buffer " + std::to_string(i) + ", " +
                                                                std::string(to_string(setup_.op))));
  UnlaunchedCall unlaunched(setup_.state->recorder(), call);
  const std::string what = "copy-engine all_reduce #" + std::to_string(call) + " (buffer " +
                           std::to_string(i) + ") on rank " + std::to_string(setup_.rank);
  if (auto failure = setup_.state->failure()) {
    throw Error(failure->category(), what + ": " + failure->what(), failure->backend_code());
  }
  const DriverApi& driver = driver_api();
  CudaApi& cuda = setup_.state->cuda();
  const BufferView& buf = setup_.buffers[i];
  const std::size_t esize = dtype_size(buf.dtype);
  const int n = setup_.size, me = setup_.rank;
  const ChunkLayout chunks(buf.count, n, esize);
  auto lo = [&](int k) { return chunks.begin(k); };
  auto chunk_bytes = [&](int k) { return chunks.size(k) * esize; };
  const std::size_t slot_elems = chunks.slot_elems();
  char* own = static_cast<char*>(buf.data);
  cudaStream_t s = res_->stream;
  const unsigned e = ++epoch_[i];
  auto flag_index = [&](FlagKind kind, int from) {
    return (std::size_t(kind) * nbuf + i) * n + from;
  };
  auto check_cu = [&](CUresult rc, const char* step) {
    if (rc != CUDA_SUCCESS) {
      throw Error(ErrorCategory::kBackend,
                  what + ": " + step + " failed (CUDA driver error " + std::to_string(rc) + ")",
                  static_cast<int>(rc));
    }
  };
  auto tell_peers = [&](FlagKind kind) {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      auto addr = reinterpret_cast<CUdeviceptr>(res_->peer_flags[p] +
                                                flag_index(kind, me) * sizeof(unsigned));
      check_cu(driver.stream_write_value32(s, addr, e, CU_STREAM_WRITE_VALUE_DEFAULT),
               "signalling a peer");
    }
  };
  auto wait_for = [&](int kind, int p, cudaStream_t on) {
    auto addr = reinterpret_cast<CUdeviceptr>(res_->flags + flag_index(FlagKind(kind), p));
    check_cu(driver.stream_wait_value32(on, addr, e, CU_STREAM_WAIT_VALUE_GEQ),
             "waiting for a peer");
  };
  // A copy with every peer, each after its `kind` flag (unless kNoWait).
  // dst(p)/src(p): where peer p's bytes go and come from; bytes(p): how many.
  // Peers are taken in rotation (rank + 1, rank + 2, ...), so that where
  // copies on one stream follow each other every GPU is read, or written, by
  // one peer at a time. With copy streams, `s` forks to them, the copies
  // (in `parts` pieces per peer) spread over them, and `s` joins them all;
  // without, they run on `s`.
  const bool forked = !res_->copies.empty();
  const int streams = forked ? static_cast<int>(res_->copies.size()) : 1;
  const int parts = std::max(1, streams / std::max(1, n - 1));
  auto copy_all = [&](int kind, auto dst, auto src, auto bytes, const char* step) {
    if (forked) {
      RTD_CUDA_CHECK(cuda, cudaEventRecord(res_->fork, s), what + ": forking to the copies");
    }
    std::vector<bool> used(streams, false);
    for (int turn = 1, k = 0; turn < n; ++turn) {
      const int p = (me + turn) % n;
      const std::size_t total = bytes(p);
      for (int j = 0; j < parts; ++j, ++k) {
        const BytePiece piece = piece_of(total, parts, j);
        const std::size_t from = piece.first, len = piece.last - piece.first;
        cudaStream_t on = forked ? res_->copies[k % streams] : s;
        if (forked && !used[k % streams]) {
          RTD_CUDA_CHECK(cuda, cudaStreamWaitEvent(on, res_->fork, 0),
                         what + ": ordering a copy after the reducer's stream");
          used[k % streams] = true;
        }
        if (kind != kNoWait) wait_for(kind, p, on);
        if (len == 0) continue;
        RTD_CUDA_CHECK(
            cuda, cudaMemcpyAsync(dst(p) + from, src(p) + from, len, cudaMemcpyDeviceToDevice, on),
            what + ": " + step);
      }
    }
    for (int k = 0; forked && k < streams; ++k) {
      if (!used[k]) continue;
      RTD_CUDA_CHECK(cuda, cudaEventRecord(res_->joins[k], res_->copies[k]),
                     what + ": recording a copy's end");
      RTD_CUDA_CHECK(cuda, cudaStreamWaitEvent(s, res_->joins[k], 0),
                     what + ": joining the copies");
    }
  };
  // A peer's scratch slot: peers in rank order, skipping this rank.
  auto slot_of = [&](int p) { return p < me ? p : p - 1; };

  RTD_CUDA_CHECK(cuda, cudaSetDevice(setup_.device), what + ": selecting the GPU");
  RTD_CUDA_CHECK(cuda, cudaEventRecord(res_->start, static_cast<cudaStream_t>(caller.cuda_stream)),
                 what + ": recording on the caller's stream");
  RTD_CUDA_CHECK(cuda, cudaStreamWaitEvent(s, res_->start, 0),
                 what + ": ordering after the caller's stream");
  tell_peers(kFinal);
  copy_all(  // pull every peer's copy of my chunk into scratch
      kFinal, [&](int p) { return res_->scratch + slot_of(p) * slot_elems * esize; },
      [&](int p) { return res_->peer_buffers[p][i] + lo(me) * esize; },
      [&](int) { return chunk_bytes(me); }, "pulling a peer's chunk");
  reduce_slots_async(own + lo(me) * esize, res_->scratch, slot_elems, n - 1, chunks.size(me),
                     buf.dtype, setup_.op == ReduceOp::kAvg ? 1.0f / n : 1.0f, setup_.reduce_blocks,
                     s);
  RTD_CUDA_CHECK(cuda, cudaGetLastError(), what + ": launching the addition");
  // Push my reduced chunk into every peer's buffer (my chunk of theirs was
  // read by me alone, in the pulls above), then say so. A peer's "reduced"
  // flag thus also means it has finished reading my buffer.
  copy_all(
      kNoWait, [&](int p) { return res_->peer_buffers[p][i] + lo(me) * esize; },
      [&](int) { return own + lo(me) * esize; }, [&](int) { return chunk_bytes(me); },
      "pushing my reduced chunk");
  tell_peers(kReduced);
  for (int p = 0; p < n; ++p) {
    if (p != me) wait_for(kReduced, p, s);
  }
  std::shared_ptr<cudaEvent_t> end = setup_.state->take_end_event();
  RTD_CUDA_CHECK(cuda, cudaEventRecord(*end, s), what + ": recording the end event");
  setup_.state->watch(s, end, what, {call});
  unlaunched.launched();
  return std::make_shared<NcclWork>(setup_.state, std::move(end), what, call);
}

}  // namespace rtd::nccl
