// StoreRelay: the job's Store service on this node's port, for this node's
// workers (DTRUN_STORE), over a store kept elsewhere: with the etcd backend,
// the workers' store in etcd (etcd_store.h). The workers speak to it as to
// any dtrun store (the job token on every call); nothing they hold is lost
// with another node, the rounds' host included.
//
// Each call holds a server thread while the store answers; a Get that waits
// holds one until its key appears or its time is up, at most kMaxWaiting at
// once (a node's few workers wait for a few keys each).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "rt_dist/store.h"
#include "runtime/core/tls_files.h"

namespace rtd::launcher {

class StoreRelay {
 public:
  static constexpr int kMaxWaiting = 1024;

  // Empty while this node's lease in etcd holds; else how it was lost.
  using LeaseLost = std::function<std::string()>;

  // Listens on bind_ip, a free port; throws rtd::Error(kConfig) when it cannot.
  // A call that finds etcd unavailable (no quorum, a leader election, members
  // paused) is tried again while lease_lost says the lease holds: a pause
  // shorter than the lease's TTL is ridden out; then the call fails saying
  // that this node lost its lease (the agent stops the workers then too).
  StoreRelay(const std::string& bind_ip, std::shared_ptr<Store> store, const std::string& token,
             const TlsFiles& tls, LeaseLost lease_lost = {});
  ~StoreRelay();
  StoreRelay(const StoreRelay&) = delete;
  StoreRelay& operator=(const StoreRelay&) = delete;

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rtd::launcher
