// SlotPool: a few equal buffers that units borrow in turn (gathered
// parameters, full gradients), so that a sharded model holds in full only the
// units in use. A slot's last collective (busy work) must finish before the
// next borrower writes it: acquire() orders the caller's stream after it.
// Free slots are handed out oldest-released first, which gives the work of
// the slot released last the most time. Not thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/device_memory.h"
#include "rt_dist/work.h"

namespace rtd {

class SlotPool {
 public:
  SlotPool(int slots, int units, const std::function<std::unique_ptr<DeviceBuffer>()>& make);

  // A free slot, now held by unit, with stream ordered after its busy work;
  // -1 where every slot is held.
  int acquire(int unit, DeviceType device = DeviceType::kCpu, StreamRef stream = {});
  void release(int unit);  // no-op where unit holds none
  void set_busy(int slot, std::shared_ptr<Work> work) { busy_[slot] = std::move(work); }

  bool holds(int unit) const { return owner_slot_[unit] >= 0; }
  int slot_of(int unit) const { return owner_slot_[unit]; }
  bool has_free() const { return !free_.empty(); }
  int slots() const { return static_cast<int>(buffers_.size()); }
  void* data(int slot) const { return buffers_[slot]->data(); }

 private:
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::vector<std::shared_ptr<Work>> busy_;  // per slot
  std::vector<int> owner_slot_;              // per unit, -1: none
  std::deque<int> free_;
};

}  // namespace rtd
