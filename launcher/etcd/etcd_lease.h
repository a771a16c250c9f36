// EtcdLease: an agent's lease in etcd, renewed on a thread of its own. The
// keys an agent writes with it (its presence; the host key while it hosts)
// go when the agent does: at once when it exits (the lease is revoked),
// after the TTL when it is killed or cut off from etcd.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/etcd/etcd_client.h"

namespace rtd::launcher {

class EtcdLease {
 public:
  // Grants the lease (throws rtd::Error when etcd does not answer) and
  // renews it every third of its TTL.
  EtcdLease(EtcdClient& client, std::chrono::seconds ttl);
  // Stops renewing and revokes the lease (best effort: if etcd does not
  // answer, the keys go after the TTL).
  ~EtcdLease();
  EtcdLease(const EtcdLease&) = delete;
  EtcdLease& operator=(const EtcdLease&) = delete;

  std::int64_t id() const { return id_; }
  // Empty while the lease holds; else how it was lost (etcd said it expired,
  // or no member renewed it for the whole TTL: said from the moment the TTL
  // is over, not only once a renewal attempt gives up).
  std::string lost();

 private:
  void renew_loop();

  EtcdClient& client_;
  const std::chrono::seconds ttl_;
  std::int64_t id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string lost_;
  std::chrono::steady_clock::time_point held_until_;  // the last renewal's TTL, from then
  std::thread thread_;
};

}  // namespace rtd::launcher
