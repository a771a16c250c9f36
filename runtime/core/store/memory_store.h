// MemoryStore: the Store held in one process (tests, worlds of one, and the
// state behind dtrun's gRPC store service).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include "rt_dist/store.h"

namespace rtd {

// What one store may hold (the job's store on the rendezvous host: every
// input from the port is bounded). The defaults of a MemoryStore made
// without limits hold anything.
struct StoreLimits {
  std::size_t max_keys = SIZE_MAX;
  std::size_t max_bytes = SIZE_MAX;  // keys and values, plus kKeyOverhead a key
  std::size_t max_key_bytes = SIZE_MAX;
  std::size_t max_value_bytes = SIZE_MAX;
  // What a key costs besides its bytes (the map's node and the strings' headers).
  static constexpr std::size_t kKeyOverhead = 96;
};

class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  explicit MemoryStore(StoreLimits limits) : limits_(limits) {}

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool remove(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;

  // What it holds now: keys, and bytes as StoreLimits counts them.
  std::size_t keys();
  std::size_t bytes();

  // Called with the key after every set, add and successful compare_set,
  // outside the store's lock (the rendezvous server wakes the heartbeats
  // that watch it). Set before the store is shared.
  void set_observer(std::function<void(const std::string& key)> observer) {
    observer_ = std::move(observer);
  }

 private:
  void changed(const std::string& key);
  // Throws kConfig naming the limit when writing `value` under `key` (which
  // holds `old_bytes` now, or does not exist) would pass one.
  void check_limits_locked(const std::string& key, const std::string* old_value,
                           std::size_t new_value_bytes) const;
  void put_locked(const std::string& key, const std::string& value);

  std::function<void(const std::string&)> observer_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
  const StoreLimits limits_{};
  std::size_t bytes_ = 0;
};

}  // namespace rtd
