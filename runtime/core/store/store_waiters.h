// The Gets that wait for a key that is not there yet, held as entries (no
// thread each): admitted against the store's bounds (how many, their weight,
// how many from one host), and each answered exactly once: by a write of its
// key, at its deadline, when its caller goes away, or at the end of the
// service. Apart from gRPC's runtime (StoreService gives each entry its
// call's reactor to answer through), so that its tests drive it from threads
// alone, under ThreadSanitizer too (tests/sanitize/sanitize.sh).
#pragma once

#include <grpcpp/support/status.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/core/store/memory_store.h"

namespace rtd {

// The bounds of the job's store on the port (docs/dtrun.md, "Limits").
struct StoreServiceLimits {
  StoreLimits store{.max_keys = 262144,
                    .max_bytes = 256u << 20,
                    .max_key_bytes = 4096,
                    .max_value_bytes = (4u << 20) - (64u << 10)};
  // Gets waiting at once: counted, and weighed (their keys, and what gRPC
  // holds for a call: kWaiterCost), in all and per peer host, so that no
  // client (a worker, or anyone without a token) can grow the host's memory
  // past them or take every place.
  std::size_t max_waiters = 16384;
  std::size_t max_waiter_bytes = 256u << 20;
  std::size_t max_waiters_per_peer = 4096;
  std::chrono::milliseconds max_wait{24 * 3600 * 1000};  // a Get's timeout_ms, clamped
  std::size_t max_check_keys = 4096;                     // keys of one Check
  // What one waiting Get costs the host besides its key: gRPC's call state,
  // the request and the reply (about 20-29 KB were seen with 66,000 waits).
  static constexpr std::size_t kWaiterCost = 24u << 10;
};
// "'key'", cut at 64 bytes, for messages.
std::string shown_key(const std::string& key);

class StoreWaiters {
 public:
  using Clock = std::chrono::steady_clock;
  // How a wait ends: OK with its value, or the status to answer with (value null).
  using Answer = std::function<void(const grpc::Status&, const std::string* value)>;
  struct Entry {
    std::string key;
    std::string peer;  // its caller's host (the peer's address without the port)
    Clock::time_point since;
    Clock::time_point until;
    std::function<bool()> cancelled;  // its caller went away
    Answer answer;
    std::size_t weight() const { return key.size() + StoreServiceLimits::kWaiterCost; }
  };

  explicit StoreWaiters(const StoreServiceLimits& limits) : limits_(limits) {}

  // Holds e until its key is written (OK), or answers nothing and returns
  // why not (RESOURCE_EXHAUSTED past a bound, UNAVAILABLE after cancel()).
  grpc::Status admit(Entry e);
  // Answers the entries waiting for key with what lookup() finds then (none:
  // the key was deleted again at once, which ends the wait too).
  void wake(const std::string& key, const std::function<std::optional<std::string>()>& lookup);
  // Answers those past their deadline, and those whose caller went away.
  void expire();
  // Answers every one (UNAVAILABLE: the service ends); later ones are refused.
  void cancel();
  std::size_t size();
  std::size_t bytes();  // their weight

 private:
  grpc::Status admissible_locked(const Entry& e) const;
  void forget_locked(const Entry& e);  // its weight and place given back

  const StoreServiceLimits limits_;
  std::mutex mu_;
  std::multimap<std::string, Entry> entries_;
  std::size_t bytes_ = 0;                       // their weight (mu_)
  std::map<std::string, std::size_t> by_peer_;  // entries per peer host (mu_)
  bool stopping_ = false;
};

}  // namespace rtd
