// CopyEngineAllReduce: set-up and run, on CePeers.
#include "collectives/nccl/ce_all_reduce.h"

#include "collectives/nccl/ce_chunks.h"
#include "collectives/nccl/ce_kernels.h"

namespace rtd::nccl {
namespace {

enum FlagKind { kFinal = 0, kReduced = 1, kFlagKinds = 2 };

}  // namespace

std::unique_ptr<CopyEngineAllReduce> CopyEngineAllReduce::create(const CeSetup& setup,
                                                                 std::string* why) {
  std::size_t max_slot_bytes = 0;
  for (const BufferView& b : setup.buffers) {
    const std::size_t slot = ChunkLayout(b.count, setup.size, dtype_size(b.dtype)).slot_elems();
    max_slot_bytes = std::max(max_slot_bytes, slot * dtype_size(b.dtype));
  }
  const int slots = kFlagKinds * static_cast<int>(setup.buffers.size());
  auto peers =
      CePeers::create(setup, reduce_refusal(setup), slots, (setup.size - 1) * max_slot_bytes, why);
  if (!peers) return nullptr;
  return std::unique_ptr<CopyEngineAllReduce>(new CopyEngineAllReduce(setup, std::move(peers)));
}

CopyEngineAllReduce::CopyEngineAllReduce(const CeSetup& setup, std::shared_ptr<CePeers> peers)
    : setup_(setup), peers_(std::move(peers)), epoch_(setup.buffers.size(), 0) {
  setup_.store = nullptr;  // used only during setup
}

CopyEngineAllReduce::~CopyEngineAllReduce() = default;

std::shared_ptr<Work> CopyEngineAllReduce::run(int i, StreamRef caller) {
  const int nbuf = static_cast<int>(setup_.buffers.size());
  if (i < 0 || i >= nbuf) {
    throw Error(ErrorCategory::kInvalidArgument,
                "PersistentAllReduce::run: no buffer " + std::to_string(i));
  }
  CeCall call(*peers_, setup_.state, "persistent_all_reduce",
              call_args(setup_.buffers[i],
                        "buffer " + std::to_string(i) + ", " + std::string(to_string(setup_.op))),
              "copy-engine all_reduce", " (buffer " + std::to_string(i) + ")", epoch_[i]);
  const BufferView& buf = setup_.buffers[i];
  const std::size_t esize = dtype_size(buf.dtype);
  const int n = setup_.size, me = setup_.rank;
  const ChunkLayout chunks(buf.count, n, esize);
  const std::size_t mine = chunks.begin(me) * esize, bytes = chunks.size(me) * esize;
  const std::size_t slot_bytes = chunks.slot_elems() * esize;
  char* own = static_cast<char*>(buf.data);
  const int final_slot = kFinal * nbuf + i, reduced_slot = kReduced * nbuf + i;
  // A peer's scratch slot: peers in rank order, skipping this rank.
  auto slot_of = [&](int p) { return p < me ? p : p - 1; };

  call.start_after(caller);
  call.tell_peers(final_slot);
  call.copy_with_peers(  // pull every peer's copy of my chunk into scratch
      final_slot, [&](int p) { return peers_->scratch() + slot_of(p) * slot_bytes; },
      [&](int p) { return peers_->peer_buffer(p, i) + mine; }, bytes, "pulling a peer's chunk");
  const DeviceSpans::Mark adding = call.mark();
  reduce_slots_async(own + mine, own + mine, peers_->scratch(), chunks.slot_elems(), n - 1,
                     chunks.size(me), buf.dtype, setup_.op == ReduceOp::kAvg ? 1.0f / n : 1.0f,
                     setup_.reduce_blocks, peers_->stream());
  call.check_launch("launching the addition");
  call.span(adding, "addition", bytes * (n - 1));
  // Push my reduced chunk into every peer's buffer (my chunk of theirs was
  // read by me alone, in the pulls above), then say so. A peer's "reduced"
  // flag thus also means it has finished reading my buffer.
  call.copy_with_peers(
      -1, [&](int p) { return peers_->peer_buffer(p, i) + mine; }, [&](int) { return own + mine; },
      bytes, "pushing my reduced chunk");
  call.tell_peers(reduced_slot);
  call.wait_for_all(reduced_slot);
  return call.finish();
}

}  // namespace rtd::nccl
