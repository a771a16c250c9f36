// MemoryStore: a map under a mutex; get() waits on a condition variable.
#include "runtime/core/store/memory_store.h"

#include <charconv>

#include "rt_dist/error.h"

namespace rtd {

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  changed(key);
}

void MemoryStore::changed(const std::string& key) {
  changed_.notify_all();
  if (observer_) observer_(key);
}

std::string MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool present = changed_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; });
  if (!present) {
    throw Error(ErrorCategory::kTimeout, "store: key '" + key + "' did not appear within " +
                                             std::to_string(timeout.count()) + " ms");
  }
  return data_[key];
}

std::optional<std::string> MemoryStore::try_get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      const std::string& text = it->second;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size()) {
        throw Error(ErrorCategory::kInvalidArgument,
                    "store: add on key '" + key + "' whose value is not an integer");
      }
    }
    value += delta;
    data_[key] = std::to_string(value);
  }
  changed(key);
  return value;
}

std::string MemoryStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  std::string result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return "";
      data_[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  changed(key);
  return result;
}

bool MemoryStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& key : keys) {
    if (data_.count(key) == 0) return false;
  }
  return true;
}

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace rtd
