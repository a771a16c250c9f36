#include "collectives/nccl/staged_collectives.h"

#include "runtime/core/log.h"

namespace rtd::nccl {
namespace {

const char* name_of(StagedCollectives::Kind kind) {
  switch (kind) {
    case StagedCollectives::Kind::kAllReduce:
      return "all_reduce";
    case StagedCollectives::Kind::kAllGather:
      return "all_gather";
    case StagedCollectives::Kind::kReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

}  // namespace

StagedCollectives::Slot* StagedCollectives::slot_for(Kind kind, const BufferView& in, ReduceOp op,
                                                     std::size_t moved_bytes) {
  const bool reduces = kind != Kind::kAllGather;
  if (reduces && (!is_float_type(in.dtype) || (op != ReduceOp::kSum && op != ReduceOp::kAvg))) {
    return nullptr;
  }
  if (!reduces) op = ReduceOp::kSum;  // one slot whatever the caller's options say
  const int k = static_cast<int>(kind);
  if (refused_[k] || moved_bytes < kMinBytes) return nullptr;
  const auto key = std::make_tuple(k, in.count, static_cast<int>(in.dtype), static_cast<int>(op));
  if (auto it = slots_.find(key); it != slots_.end()) return it->second.get();
  if (bytes_ + in.bytes() > kMaxBytes) return nullptr;
  auto slot = std::make_unique<Slot>(Slot{
      kind, DeviceBuffer(DeviceType::kCuda, device_, in.bytes()), BufferView{}, nullptr, nullptr});
  slot->view = BufferView{.data = slot->buffer.data(),
                          .count = in.count,
                          .dtype = in.dtype,
                          .device = DeviceType::kCuda,
                          .device_index = device_};
  std::string why;
  if (kind == Kind::kAllReduce) {
    slot->reduce = make_reduce_(slot->view, op, &why);
  } else {
    slot->shard = make_shard_(slot->view, kind == Kind::kAllGather, op, &why);
  }
  if (!slot->reduce && !slot->shard) {
    refused_[k] = true;
    log::get("nccl")->info("{} staged by copy engines not used: {}", name_of(kind), why);
    return nullptr;
  }
  bytes_ += in.bytes();
  log::get("nccl")->info("{} of {} x {} staged by copy engines ({} MiB staged in all)",
                         name_of(kind), in.count, to_string(in.dtype), bytes_ >> 20);
  return slots_.emplace(key, std::move(slot)).first->second.get();
}

void StagedCollectives::run(Slot& slot, const BufferView& in, const BufferView& out, StreamRef s) {
  cast_async(in, slot.view, s);
  if (slot.kind == Kind::kAllReduce) {
    slot.reduce->run(0, s)->wait(s);
    cast_async(slot.view, out, s);
  } else {
    slot.shard->run(slot.view, out, s)->wait(s);
  }
}

}  // namespace rtd::nccl
