// EtcdHosting: the etcd backend's answer to "which agent hosts the rounds".
// No node is special: every agent holds a lease in etcd and its presence
// key under it; the first to create the job's host key (with its lease)
// starts the rendezvous server (rounds, heartbeats, the store) and the
// others join it there. When the host is lost, its key goes with its lease
// (at once if it exits, after --heartbeat-timeout if it is killed or cut
// off), one of the survivors is elected, and it takes over the running round
// that etcd records: the next round forms without the lost node, as it
// would under one host (docs/rendezvous.md, "The etcd backend").
//
// Keys, under "/dtrun/<rdzv-id>/": "host" ("ADDR:PORT NODE_ID", leased),
// "agents/<node_id>" (leased), "round" (proto::RoundRecord), and the
// workers' store under "store/<run id>/" (etcd_store.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/etcd/etcd_client.h"
#include "launcher/etcd/etcd_lease.h"
#include "launcher/membership.h"
#include "launcher/rendezvous_server.h"
#include "rt_dist/store.h"

namespace rtd::launcher {

struct EtcdHostingOptions {
  std::vector<std::string> endpoints;
  TlsFiles tls;
  std::string job;  // --rdzv-id: the key prefix's name
  std::chrono::seconds ttl{30};
  std::string node_id;
  std::string node_addr;
};

class EtcdHosting {
 public:
  // Starts this agent's server when it is elected: given the running round
  // to take over (none for a new job).
  using StartServer =
      std::function<std::unique_ptr<RendezvousServer>(const std::optional<ResumeFrom>& resume)>;

  // Connects, takes the lease and says this agent is here (throws
  // rtd::Error(kUnavailable) when etcd does not answer within the timeout).
  explicit EtcdHosting(EtcdHostingOptions options);
  ~EtcdHosting();

  // The address of the rounds' host: the agent's that holds the host key,
  // or this agent's own, elected now (*server then holds it). `gone`: the
  // address of a host this agent found lost; it waits for its key to go.
  // Throws rtd::Error(kTimeout) at `until`.
  std::string find_host(const std::string& gone, SystemTime until, const StartServer& start,
                        std::unique_ptr<RendezvousServer>* server);
  // Records the round the host's server started (ServerOptions::on_round).
  void record(const proto::RoundRecord& round);
  // The workers' store of the run (JoinResponse.run_id), in etcd.
  std::shared_ptr<Store> job_store(const std::string& run_id);
  // The job ended: its round record and its store go (the host's; the leased
  // keys go with the lease).
  void forget_job();
  // Empty while this agent's lease holds; else how it was lost.
  std::string lost();
  std::string describe() const;
  // Its client (tests set its fault hook).
  EtcdClient& client() { return *client_; }

 private:
  std::optional<ResumeFrom> resume_point();

  EtcdHostingOptions o_;
  std::string prefix_;
  std::shared_ptr<EtcdClient> client_;
  std::unique_ptr<EtcdLease> lease_;
};

}  // namespace rtd::launcher
