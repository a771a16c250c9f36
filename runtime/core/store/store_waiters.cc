// StoreWaiters: waiting Gets as entries, bounded, each answered once (store_waiters.h).
#include "runtime/core/store/store_waiters.h"

#include <malloc.h>

#include <vector>

namespace rtd {
namespace {

long long ms_since(StoreWaiters::Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(StoreWaiters::Clock::now() - since)
      .count();
}

// Thousands of ended waits leave their memory in malloc's free lists.
void trim_after(std::size_t released) {
  if (released >= 1024) malloc_trim(0);
}

}  // namespace

std::string shown_key(const std::string& key) {
  return "'" + key.substr(0, 64) + (key.size() > 64 ? "...'" : "'");
}

grpc::Status StoreWaiters::admit(Entry e) {
  std::lock_guard<std::mutex> lock(mu_);
  grpc::Status status = admissible_locked(e);
  if (!status.ok()) return status;
  bytes_ += e.weight();
  ++by_peer_[e.peer];
  std::string key = e.key;
  entries_.emplace(std::move(key), std::move(e));
  return grpc::Status::OK;
}

grpc::Status StoreWaiters::admissible_locked(const Entry& e) const {
  if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the store is shutting down");
  auto exhausted = [](const std::string& why) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "store: " + why + "; retry, or wait for fewer keys at once");
  };
  if (entries_.size() >= limits_.max_waiters)
    return exhausted(std::to_string(entries_.size()) +
                     " calls already wait for keys, the most the store holds");
  if (bytes_ + e.weight() > limits_.max_waiter_bytes)
    return exhausted("the calls waiting for keys already hold " + std::to_string(bytes_) +
                     " bytes, the most the store gives them");
  const auto it = by_peer_.find(e.peer);
  if (it != by_peer_.end() && it->second >= limits_.max_waiters_per_peer)
    return exhausted(std::to_string(it->second) + " calls from " + e.peer +
                     " already wait for keys, the most one host may have waiting");
  return grpc::Status::OK;
}

void StoreWaiters::forget_locked(const Entry& e) {
  bytes_ -= e.weight();
  auto it = by_peer_.find(e.peer);
  if (it != by_peer_.end() && --it->second == 0) by_peer_.erase(it);
}

void StoreWaiters::wake(const std::string& key,
                        const std::function<std::optional<std::string>()>& lookup) {
  std::vector<Entry> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [first, last] = entries_.equal_range(key);
    for (auto it = first; it != last; ++it) {
      forget_locked(it->second);
      ready.push_back(std::move(it->second));
    }
    entries_.erase(first, last);
  }
  if (ready.empty()) return;
  const auto value = lookup();
  for (Entry& e : ready) {
    if (value) {
      e.answer(grpc::Status::OK, &*value);
    } else {
      e.answer(grpc::Status(grpc::StatusCode::ABORTED,
                            "store: key " + shown_key(key) + " was deleted while waited for"),
               nullptr);
    }
  }
}

void StoreWaiters::expire() {
  const auto now = Clock::now();
  std::vector<Entry> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.until <= now || (it->second.cancelled && it->second.cancelled())) {
        forget_locked(it->second);
        due.push_back(std::move(it->second));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Entry& e : due) {
    e.answer(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "store: key " + shown_key(e.key) + " did not appear within " +
                              std::to_string(ms_since(e.since)) + " ms"),
             nullptr);
  }
  const std::size_t released = due.size();
  due.clear();
  trim_after(released);
}

void StoreWaiters::cancel() {
  std::multimap<std::string, Entry> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    all.swap(entries_);
    bytes_ = 0;
    by_peer_.clear();
  }
  for (auto& [key, e] : all)
    e.answer(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "the store is shutting down (the job ended)"),
        nullptr);
}

std::size_t StoreWaiters::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::size_t StoreWaiters::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace rtd
