// CopyEngineShardCollective: set-up and run, on CePeers.
#include "collectives/nccl/ce_shard_collective.h"

#include "collectives/flight_recorder.h"
#include "collectives/nccl/ce_kernels.h"
#include "collectives/validate.h"

namespace rtd::nccl {
namespace {

enum FlagSlot { kReady = 0, kDone = 1, kFlagSlots = 2 };

}  // namespace

std::unique_ptr<CopyEngineShardCollective> CopyEngineShardCollective::create(const CeSetup& setup,
                                                                             bool gather,
                                                                             std::string* why) {
  // A reduce-scatter's output is at most 1/size of a source: a slot per peer.
  std::size_t slot_bytes = 0;
  if (!gather) {
    for (const BufferView& b : setup.buffers) {
      const std::size_t block = (b.bytes() + setup.size - 1) / setup.size;
      slot_bytes = std::max(slot_bytes, (block + 15) / 16 * 16);
    }
  }
  auto peers = CePeers::create(setup, gather ? "" : reduce_refusal(setup), kFlagSlots,
                               (setup.size - 1) * slot_bytes, why);
  if (!peers) return nullptr;
  return std::unique_ptr<CopyEngineShardCollective>(
      new CopyEngineShardCollective(setup, gather, slot_bytes, std::move(peers)));
}

CopyEngineShardCollective::CopyEngineShardCollective(const CeSetup& setup, bool gather,
                                                     std::size_t slot_bytes,
                                                     std::shared_ptr<CePeers> peers)
    : setup_(setup), gather_(gather), slot_bytes_(slot_bytes), peers_(std::move(peers)) {
  setup_.store = nullptr;  // used only during setup
}

CopyEngineShardCollective::~CopyEngineShardCollective() {
  if (in_place_scratch_) {
    cudaSetDevice(setup_.device);
    cudaFree(in_place_scratch_);  // waits for the runs that use it
  }
}

char* CopyEngineShardCollective::in_place_scratch(CeCall& call) {
  if (!in_place_scratch_) {
    const std::size_t bytes = std::max<std::size_t>(16, (setup_.size - 1) * slot_bytes_);
    call.check_result(cudaMalloc(&in_place_scratch_, bytes),
                      "allocating scratch for an in-place reduce-scatter");
  }
  return static_cast<char*>(in_place_scratch_);
}

std::shared_ptr<Work> CopyEngineShardCollective::run(BufferView in, BufferView out,
                                                     StreamRef caller) {
  const int n = setup_.size, me = setup_.rank;
  const char* op = gather_ ? "persistent all_gather" : "persistent reduce_scatter";
  if (gather_) {
    validate::all_gather(in, out, n, DeviceType::kCuda);
  } else {
    validate::reduce_scatter(in, out, setup_.op, n, DeviceType::kCuda);
    if (!is_float_type(in.dtype)) {
      throw Error(ErrorCategory::kInvalidArgument,
                  std::string(op) + ": copy engines reduce float32, bfloat16 or float16 only");
    }
  }
  const validate::SourcePlace place =
      validate::shard_source(op, gather_, setup_.buffers, in, out, me, n);
  CeCall call(*peers_, setup_.state,
              gather_ ? "persistent_all_gather" : "persistent_reduce_scatter",
              call_args(in, "source " + std::to_string(place.source) +
                                (gather_ ? "" : ", " + std::string(to_string(setup_.op)))),
              gather_ ? "copy-engine all_gather" : "copy-engine reduce_scatter", "", epoch_);
  // Where peer p's input starts, mapped here.
  auto input_of = [&](int p) {
    return peers_->peer_buffer(p, place.source) + place.offset +
           (place.in_place_gather ? p * in.bytes() : 0);
  };
  char* own_in = static_cast<char*>(in.data);
  char* own_out = static_cast<char*>(out.data);

  call.start_after(caller);
  call.tell_peers(kReady);
  if (gather_) {
    call.copy_local(own_out + me * in.bytes(), own_in, in.bytes(), "copying my own block");
    call.copy_with_peers(
        kReady, [&](int p) { return own_out + p * in.bytes(); }, input_of, in.bytes(),
        "pulling a peer's input");
  } else {
    // The first peer in rotation lands its block in out itself, the others in
    // scratch slots; then out = scale * (out + own block + slots). Where out is
    // this rank's own block (in place), every peer lands in scratch.
    const std::size_t block = out.bytes();
    const bool in_place = own_out == own_in + me * block;
    char* slots = in_place ? in_place_scratch(call) : peers_->scratch();
    const int first = (me + 1) % n;
    auto landing = [&](int p) {
      if (!in_place && p == first) return own_out;
      const int k = (p - me + n) % n - (in_place ? 1 : 2);  // rotation order
      return slots + k * slot_bytes_;
    };
    call.copy_with_peers(
        kReady, landing, [&](int p) { return input_of(p) + me * block; }, block,
        "pulling my block of a peer's input");
    const std::size_t slot_elems = slot_bytes_ / dtype_size(in.dtype);
    const float scale = setup_.op == ReduceOp::kAvg ? 1.0f / n : 1.0f;
    const int scratch_slots = in_place ? n - 1 : n - 2;
    const DeviceSpans::Mark adding = call.mark();
    if (!in_place) {  // out += own block (as a one-slot scratch)
      reduce_slots_async(own_out, own_out, own_in + me * block, 0, 1, out.count, in.dtype,
                         scratch_slots == 0 ? scale : 1.0f, setup_.reduce_blocks, peers_->stream());
      call.check_launch("launching the addition");
    }
    if (scratch_slots > 0) {
      reduce_slots_async(own_out, own_out, slots, slot_elems, scratch_slots, out.count, in.dtype,
                         scale, setup_.reduce_blocks, peers_->stream());
      call.check_launch("launching the addition");
    }
    call.span(adding, "addition", block * (n - 1));
  }
  call.tell_peers(kDone);
  call.wait_for_all(kDone);
  return call.finish();
}

std::shared_ptr<Work> CopyEngineShardCollective::gather_blocks(const std::vector<BufferView>& outs,
                                                               StreamRef caller) {
  if (!gather_) return PersistentShardCollective::gather_blocks(outs, caller);
  const int n = setup_.size, me = setup_.rank;
  const BufferView& source = setup_.buffers.at(0);
  validate::gather_blocks(source, outs, n, DeviceType::kCuda);
  const std::size_t block = source.bytes() / n;
  BufferView own = source;
  own.count = source.count / n;
  CeCall call(*peers_, setup_.state, "persistent_all_gather",
              call_args(own, "blocks into " + std::to_string(outs.size()) + " outputs"),
              "copy-engine all_gather", "", epoch_);
  const char* own_block = static_cast<const char*>(source.data) + me * block;
  call.start_after(caller);
  call.tell_peers(kReady);
  std::size_t offset = 0;  // bytes into a block
  for (const BufferView& out : outs) {
    const std::size_t share = out.bytes() / n;
    char* dst = static_cast<char*>(out.data);
    call.copy_local(dst + me * share, own_block + offset, share, "copying my own share");
    call.copy_with_peers(
        kReady, [&](int p) { return dst + p * share; },
        [&](int p) { return peers_->peer_buffer(p, 0) + p * block + offset; }, share,
        "pulling a peer's share");
    offset += share;
  }
  call.tell_peers(kDone);
  call.wait_for_all(kDone);
  return call.finish();
}

}  // namespace rtd::nccl
