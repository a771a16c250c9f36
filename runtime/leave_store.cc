// Counting the ranks out of a hosted store.
#include "runtime/leave_store.h"

#include <thread>

#include "runtime/core/log.h"

namespace rtd {

void leave_store(Store& store, bool host, int world_size, const char* key,
                 std::chrono::seconds wait) {
  try {
    store.add(key, 1);
    if (!host) return;
    const auto give_up = std::chrono::steady_clock::now() + wait;
    while (store.add(key, 0) < world_size && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception& e) {
    log::get("runtime")->warn("leaving the job's store: {}", e.what());
  }
}

}  // namespace rtd
