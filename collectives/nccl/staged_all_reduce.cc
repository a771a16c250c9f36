#include "collectives/nccl/staged_all_reduce.h"

#include "runtime/core/log.h"

namespace rtd::nccl {

StagedAllReduces::Slot* StagedAllReduces::slot_for(const BufferView& in, ReduceOp op) {
  if (refused_ || !is_float_type(in.dtype) || (op != ReduceOp::kSum && op != ReduceOp::kAvg) ||
      in.bytes() < kMinBytes) {
    return nullptr;
  }
  const auto key = std::make_tuple(in.count, static_cast<int>(in.dtype), static_cast<int>(op));
  if (auto it = slots_.find(key); it != slots_.end()) return it->second.get();
  if (bytes_ + in.bytes() > kMaxBytes) return nullptr;
  auto slot = std::make_unique<Slot>(
      Slot{DeviceBuffer(DeviceType::kCuda, device_, in.bytes()), BufferView{}, nullptr});
  slot->view = BufferView{.data = slot->buffer.data(),
                          .count = in.count,
                          .dtype = in.dtype,
                          .device = DeviceType::kCuda,
                          .device_index = device_};
  std::string why;
  slot->reduce = make_(slot->view, op, &why);
  if (!slot->reduce) {
    refused_ = true;
    log::get("nccl")->info("all_reduce staged by copy engines not used: {}", why);
    return nullptr;
  }
  bytes_ += in.bytes();
  log::get("nccl")->debug("all_reduce of {} x {} staged by copy engines ({} MiB staged in all)",
                          in.count, to_string(in.dtype), bytes_ >> 20);
  return slots_.emplace(key, std::move(slot)).first->second.get();
}

void StagedAllReduces::run(Slot& slot, const BufferView& in, const BufferView& out, StreamRef s) {
  cast_async(in, slot.view, s);
  slot.reduce->run(0, s)->wait(s);
  cast_async(slot.view, out, s);
}

}  // namespace rtd::nccl
