// The C interface's Store (rt_dist/c_api.h): its calls go to the caller's
// callbacks (torch's store, for the PyTorch backend and its checkpoints).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rt_dist/c_api.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"

namespace rtd::c_api {

// A callback that fails is a network error naming the key; a get that fails
// is a timeout.
class CallbackStore : public Store {
 public:
  explicit CallbackStore(const rtd_store_ops& ops) : ops_(ops) {}

  void set(const std::string& key, const std::string& value) override {
    check(ops_.set(ops_.self, key.c_str(), value.data(), value.size()), "set", key);
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::string value;
    if (ops_.get(ops_.self, key.c_str(), timeout.count(), &value) != 0) {
      throw Error(ErrorCategory::kTimeout, "store get of '" + key + "' failed or timed out after " +
                                               std::to_string(timeout.count()) + " ms");
    }
    return value;
  }
  std::optional<std::string> try_get(const std::string& key) override {
    if (!check({key})) return std::nullopt;
    return get(key, std::chrono::milliseconds(0));
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t result = 0;
    check(ops_.add(ops_.self, key.c_str(), delta, &result), "add", key);
    return result;
  }
  std::string compare_set(const std::string& key, const std::string&, const std::string&) override {
    throw Error(ErrorCategory::kInternal,
                "compare_set of '" + key + "' is not offered by a callback store");
  }
  bool remove(const std::string& key) override { return ops_.remove(ops_.self, key.c_str()) == 0; }
  bool check(const std::vector<std::string>& keys) override {
    for (const std::string& key : keys) {
      int exists = 0;
      check(ops_.check(ops_.self, key.c_str(), &exists), "check", key);
      if (!exists) return false;
    }
    return true;
  }

 private:
  static void check(int rc, const char* what, const std::string& key) {
    if (rc != 0) {
      throw Error(ErrorCategory::kUnavailable,
                  std::string("store ") + what + " of '" + key + "' failed");
    }
  }
  rtd_store_ops ops_;
};

// Refuses ops with a callback missing.
inline void check_store_ops(const rtd_store_ops* ops) {
  if (!ops || !ops->set || !ops->get || !ops->add || !ops->check || !ops->remove)
    throw Error(ErrorCategory::kInvalidArgument, "store callbacks missing");
}

}  // namespace rtd::c_api
