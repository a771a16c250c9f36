// CopyEnginePushCollective: set-up and run, on CePeers.
#include "collectives/nccl/ce_push_collective.h"

#include "collectives/nccl/ce_chunks.h"
#include "collectives/nccl/ce_kernels.h"
#include "collectives/validate.h"

namespace rtd::nccl {
namespace {

enum FlagSlot { kPushed = 0, kReduced = 1, kDone = 2, kFlagSlots = 3 };

std::size_t round16(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

// A slot holds the largest chunk (all-reduce) or a block (reduce-scatter).
std::size_t slot_bytes_for(CopyEnginePushCollective::Kind kind, std::size_t count, DType dtype,
                           int n) {
  const std::size_t esize = dtype_size(dtype);
  return kind == CopyEnginePushCollective::Kind::kAllReduce
             ? ChunkLayout(count, n, esize).slot_elems() * esize
             : round16(count / std::max(n, 1) * esize);
}

}  // namespace

std::size_t CopyEnginePushCollective::landing_bytes(Kind kind, std::size_t count, DType dtype,
                                                    int ranks) {
  // All-reduce: a slot per peer and the result; reduce-scatter: a slot per
  // peer for calls of each parity (see run's comment in the header).
  const int slots = kind == Kind::kAllReduce ? ranks : 2 * (ranks - 1);
  return std::max<std::size_t>(16, slots * slot_bytes_for(kind, count, dtype, ranks));
}

std::unique_ptr<CopyEnginePushCollective> CopyEnginePushCollective::create(CeSetup setup, Kind kind,
                                                                           std::size_t count,
                                                                           DType dtype,
                                                                           std::string* why) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t slot_bytes = slot_bytes_for(kind, count, dtype, setup.size);
  DeviceBuffer landing(DeviceType::kCuda, setup.device,
                       landing_bytes(kind, count, dtype, setup.size));
  setup.buffers.assign(1, BufferView{.data = landing.data(),
                                     .count = landing.bytes() / esize,
                                     .dtype = dtype,
                                     .device = DeviceType::kCuda,
                                     .device_index = setup.device});
  auto peers = CePeers::create(setup, reduce_refusal(setup), kFlagSlots, 0, why);
  if (!peers) return nullptr;
  return std::unique_ptr<CopyEnginePushCollective>(new CopyEnginePushCollective(
      std::move(setup), kind, count, dtype, slot_bytes, std::move(landing), std::move(peers)));
}

CopyEnginePushCollective::CopyEnginePushCollective(CeSetup setup, Kind kind, std::size_t count,
                                                   DType dtype, std::size_t slot_bytes,
                                                   DeviceBuffer landing,
                                                   std::shared_ptr<CePeers> peers)
    : setup_(std::move(setup)),
      kind_(kind),
      count_(count),
      dtype_(dtype),
      slot_bytes_(slot_bytes),
      landing_(std::move(landing)),
      peers_(std::move(peers)) {
  setup_.store = nullptr;  // used only during setup
}

// The peers (and their mappings) go before the landing area they map.
CopyEnginePushCollective::~CopyEnginePushCollective() { peers_.reset(); }

// Rank r's slots hold its peers in rank order, skipping r itself (the
// addition sums them all, from the first).
char* CopyEnginePushCollective::slot_in_peer(int p, int half) const {
  const int me = setup_.rank, n = setup_.size;
  return peers_->peer_buffer(p, 0) + ((me < p ? me : me - 1) + half * (n - 1)) * slot_bytes_;
}

std::shared_ptr<Work> CopyEnginePushCollective::run(const BufferView& in, const BufferView& out,
                                                    StreamRef caller) {
  const char* op = kind_ == Kind::kAllReduce ? "all_reduce" : "reduce_scatter";
  if (kind_ == Kind::kAllReduce) {
    validate::all_reduce(in, out, setup_.op, DeviceType::kCuda);
  } else {
    validate::reduce_scatter(in, out, setup_.op, setup_.size, DeviceType::kCuda);
  }
  if (in.count != count_ || in.dtype != dtype_) {
    throw Error(ErrorCategory::kInvalidArgument,
                std::string("copy-engine ") + op + ": set up for " + std::to_string(count_) +
                    " x " + std::string(to_string(dtype_)) + ", called with " +
                    std::to_string(in.count) + " x " + std::string(to_string(in.dtype)));
  }
  return kind_ == Kind::kAllReduce ? all_reduce(in, out, caller) : reduce_scatter(in, out, caller);
}

std::shared_ptr<Work> CopyEnginePushCollective::all_reduce(const BufferView& in,
                                                           const BufferView& out,
                                                           StreamRef caller) {
  const int n = setup_.size, me = setup_.rank;
  const std::size_t esize = dtype_size(dtype_);
  const ChunkLayout chunks(count_, n, esize);
  CeCall call(*peers_, setup_.state, "all_reduce",
              call_args(in, std::string(to_string(setup_.op)) + ", pushed"),
              "copy-engine all_reduce", "", epoch_);
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  auto chunk_bytes = [&](int p) { return chunks.size(p) * esize; };
  auto chunk_at = [&](int p) { return chunks.begin(p) * esize; };
  char* result = static_cast<char*>(landing_.data()) + (n - 1) * slot_bytes_;

  call.start_after(caller);
  call.copy_with_peers(  // my copy of each peer's chunk into its slot for me
      -1, [&](int p) { return slot_in_peer(p, 0); },
      [&](int p) { return const_cast<char*>(src) + chunk_at(p); }, chunk_bytes,
      "pushing a peer's chunk");
  call.tell_peers(kPushed);
  call.wait_for_all(kPushed);
  const DeviceSpans::Mark adding = call.mark();
  reduce_slots_async(dst + chunk_at(me), src + chunk_at(me), landing_.data(), slot_bytes_ / esize,
                     n - 1, chunks.size(me), dtype_, setup_.op == ReduceOp::kAvg ? 1.0f / n : 1.0f,
                     setup_.reduce_blocks, peers_->stream());
  call.check_launch("launching the addition");
  call.span(adding, "addition", chunk_bytes(me) * (n - 1));
  call.copy_local(result, dst + chunk_at(me), chunk_bytes(me), "copying my reduced chunk");
  call.tell_peers(kReduced);
  call.copy_with_peers(  // each peer's reduced chunk into mine
      kReduced, [&](int p) { return dst + chunk_at(p); },
      [&](int p) { return peers_->peer_buffer(p, 0) + (n - 1) * slot_bytes_; }, chunk_bytes,
      "pulling a peer's reduced chunk");
  call.tell_peers(kDone);
  call.wait_for_all(kDone);
  return call.finish();
}

std::shared_ptr<Work> CopyEnginePushCollective::reduce_scatter(const BufferView& in,
                                                               const BufferView& out,
                                                               StreamRef caller) {
  const int n = setup_.size, me = setup_.rank;
  const std::size_t block = out.bytes();
  CeCall call(*peers_, setup_.state, "reduce_scatter",
              call_args(out, std::string(to_string(setup_.op)) + ", pushed"),
              "copy-engine reduce_scatter", "", epoch_);
  const char* src = static_cast<const char*>(in.data);
  const int half = static_cast<int>(epoch_ & 1);  // this call's slots

  call.start_after(caller);
  call.copy_with_peers(  // my copy of each peer's block into its slot for me
      -1, [&](int p) { return slot_in_peer(p, half); },
      [&](int p) { return const_cast<char*>(src) + p * block; }, block, "pushing a peer's block");
  call.tell_peers(kPushed);
  call.wait_for_all(kPushed);
  const DeviceSpans::Mark adding = call.mark();
  reduce_slots_async(out.data, src + me * block,
                     static_cast<char*>(landing_.data()) + half * (n - 1) * slot_bytes_,
                     slot_bytes_ / dtype_size(dtype_), n - 1, out.count, dtype_,
                     setup_.op == ReduceOp::kAvg ? 1.0f / n : 1.0f, setup_.reduce_blocks,
                     peers_->stream());
  call.check_launch("launching the addition");
  call.span(adding, "addition", block * (n - 1));
  return call.finish();
}

}  // namespace rtd::nccl
