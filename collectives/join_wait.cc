// await_join: the store wait in slices, each slice's timeout a live warning.
#include "collectives/join_wait.h"

#include <algorithm>

#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd {

std::string await_join(Store& store, const std::string& key, const JoinWait& w) {
  using std::chrono::milliseconds;
  const milliseconds slice = w.warn_every.count() > 0 ? w.warn_every : w.timeout;
  milliseconds waited{0};
  for (;;) {
    const milliseconds step = std::max(milliseconds(1), std::min(slice, w.timeout - waited));
    try {
      return store.get(key, step);
    } catch (const Error& e) {
      if (e.category() != ErrorCategory::kTimeout) throw;
    }
    waited += step;
    const long long seconds = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
    if (waited >= w.timeout) {
      throw Error(ErrorCategory::kTimeout,
                  "rank " + std::to_string(w.rank) + ": " + w.peer +
                      " never joined communicator '" + w.communicator + "' (waited " +
                      std::to_string(seconds) +
                      " s, RTD_TIMEOUT_S): it died or hangs before creating it; its log says why");
    }
    log::get("runtime")->warn("rank {}: still waiting for {} to join communicator '{}' ({} s)",
                              w.rank, w.peer, w.communicator, seconds);
  }
}

}  // namespace rtd
