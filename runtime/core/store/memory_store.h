// MemoryStore: the Store held in one process (tests, worlds of one, and the
// state behind dtrun's gRPC store service).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>

#include "rt_dist/store.h"

namespace rtd {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool remove(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;

  // Called with the key after every set, add and successful compare_set,
  // outside the store's lock (the rendezvous server wakes the heartbeats
  // that watch it). Set before the store is shared.
  void set_observer(std::function<void(const std::string& key)> observer) {
    observer_ = std::move(observer);
  }

 private:
  void changed(const std::string& key);

  std::function<void(const std::string&)> observer_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
};

}  // namespace rtd
