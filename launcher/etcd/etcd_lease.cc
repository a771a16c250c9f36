// The agent's lease (etcd_lease.h).
#include "launcher/etcd/etcd_lease.h"

#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd::launcher {

EtcdLease::EtcdLease(EtcdClient& client, std::chrono::seconds ttl) : client_(client), ttl_(ttl) {
  held_until_ = std::chrono::steady_clock::now() + ttl_;
  id_ = client_.grant(ttl_);
  thread_ = std::thread([this] { renew_loop(); });
}

EtcdLease::~EtcdLease() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  try {
    client_.revoke(id_);
  } catch (const Error& e) {
    log::get("launcher")->debug("could not revoke the etcd lease: {}", e.what());
  }
}

std::string EtcdLease::lost() {
  std::lock_guard<std::mutex> lock(mu_);
  if (lost_.empty() && std::chrono::steady_clock::now() >= held_until_)
    return "no etcd member renewed this node's lease for " + std::to_string(ttl_.count()) +
           " s (--heartbeat-timeout); " + client_.describe() +
           " is unreachable or has lost its quorum";
  return lost_;
}

void EtcdLease::renew_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, ttl_ / 3, [this] { return stop_; })) {
    const auto held_until = held_until_;
    lock.unlock();
    std::string why;
    std::chrono::steady_clock::time_point renewed{};
    try {
      const auto asked = std::chrono::steady_clock::now();
      const std::int64_t left = client_.keep_alive(id_);
      if (left > 0)
        renewed = asked + std::chrono::seconds(left);  // from when it was asked: no later
      else
        why = client_.describe() + " says this node's lease expired";
    } catch (const Error& e) {
      if (std::chrono::steady_clock::now() >= held_until)
        why = "no etcd member renewed this node's lease for " + std::to_string(ttl_.count()) +
              " s (--heartbeat-timeout): " + e.what();
    }
    lock.lock();
    if (renewed != std::chrono::steady_clock::time_point{}) held_until_ = renewed;
    if (!why.empty()) {
      lost_ = why;
      return;
    }
  }
}

}  // namespace rtd::launcher
