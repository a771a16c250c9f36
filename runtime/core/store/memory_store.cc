// MemoryStore: a map under a mutex; get() waits on a condition variable.
#include "runtime/core/store/memory_store.h"

#include <charconv>

#include "rt_dist/error.h"

namespace rtd {

void MemoryStore::check_limits_locked(const std::string& key, const std::string* old_value,
                                      std::size_t new_value_bytes) const {
  const StoreLimits& l = limits_;
  auto refuse = [&](const std::string& what) {
    throw Error(ErrorCategory::kConfig,
                "store: '" + key.substr(0, 64) + (key.size() > 64 ? "...'" : "'") +
                    " refused: " + what +
                    "; the job's store holds coordination data, not bulk data (use files or the "
                    "collectives for those)");
  };
  if (key.size() > l.max_key_bytes)
    refuse("the key has " + std::to_string(key.size()) + " bytes, more than the " +
           std::to_string(l.max_key_bytes) + " allowed");
  if (new_value_bytes > l.max_value_bytes)
    refuse("the value has " + std::to_string(new_value_bytes) + " bytes, more than the " +
           std::to_string(l.max_value_bytes) + " allowed");
  if (!old_value && data_.size() >= l.max_keys)
    refuse("the store holds " + std::to_string(data_.size()) + " keys, its quota");
  const std::size_t before =
      old_value ? key.size() + old_value->size() + StoreLimits::kKeyOverhead : 0;
  const std::size_t after = key.size() + new_value_bytes + StoreLimits::kKeyOverhead;
  if (after > before && bytes_ - before + after > l.max_bytes)
    refuse("the store would hold " + std::to_string(bytes_ - before + after) +
           " bytes, more than its quota of " + std::to_string(l.max_bytes));
}

void MemoryStore::put_locked(const std::string& key, const std::string& value) {
  auto it = data_.find(key);
  check_limits_locked(key, it == data_.end() ? nullptr : &it->second, value.size());
  if (it == data_.end()) {
    bytes_ += key.size() + value.size() + StoreLimits::kKeyOverhead;
    data_.emplace(key, value);
  } else {
    bytes_ = bytes_ - it->second.size() + value.size();
    it->second = value;
  }
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    put_locked(key, value);
  }
  changed(key);
}

std::size_t MemoryStore::keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

std::size_t MemoryStore::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
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
  return data_.find(key)->second;
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
    if (__builtin_add_overflow(value, delta, &value)) {
      throw Error(ErrorCategory::kInvalidArgument, "store: add of " + std::to_string(delta) +
                                                       " on key '" + key.substr(0, 64) +
                                                       "' overflows a 64-bit integer");
    }
    put_locked(key, std::to_string(value));
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
      put_locked(key, desired);
      result = desired;
    } else if (it->second == expected) {
      put_locked(key, desired);
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
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  bytes_ -= key.size() + it->second.size() + StoreLimits::kKeyOverhead;
  data_.erase(it);
  return true;
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
