// SlotPool (slot_pool.h).
#include "sharding/slot_pool.h"

#include "sharding/rank_agreement.h"

namespace rtd {

SlotPool::SlotPool(int slots, int units, const std::function<std::unique_ptr<DeviceBuffer>()>& make)
    : busy_(slots), owner_slot_(units, -1) {
  for (int k = 0; k < slots; ++k) {
    buffers_.push_back(make());
    free_.push_back(k);
  }
}

int SlotPool::acquire(int unit, DeviceType device, StreamRef stream) {
  if (free_.empty()) return -1;
  const int slot = free_.front();
  free_.pop_front();
  owner_slot_[unit] = slot;
  if (busy_[slot]) complete(*busy_[slot], device, stream);
  busy_[slot] = nullptr;
  return slot;
}

void SlotPool::release(int unit) {
  const int slot = owner_slot_[unit];
  if (slot < 0) return;
  owner_slot_[unit] = -1;
  free_.push_back(slot);
}

}  // namespace rtd
