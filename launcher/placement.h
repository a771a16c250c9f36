// Where this node stands in the job: it hosts the rendezvous (node rank 0)
// or joins it, and its place in the round (proto::JoinResponse). Shared by
// the agent and `dtrun doctor` across nodes.
#pragma once

#include <memory>
#include <string>

#include "launcher/etcd/etcd_hosting.h"
#include "launcher/etcd/store_relay.h"
#include "launcher/options.h"
#include "launcher/rendezvous_server.h"
#include "rendezvous.pb.h"

namespace rtd::launcher {

struct Placement {
  proto::JoinResponse layout;
  std::string store_addr;
  std::string node_addr;
  std::string node_id;                       // this agent's, the same in every round
  bool host = false;                         // it hosts the rendezvous (node rank 0)
  std::unique_ptr<RendezvousServer> server;  // the host only
  std::unique_ptr<EtcdHosting> etcd;         // --rdzv-backend=etcd
  // The etcd backend: the workers' store, in etcd, and this node's relay of
  // it to its workers at job_store_addr. Otherwise the host's store (store_addr).
  std::shared_ptr<Store> job_store;
  std::unique_ptr<StoreRelay> relay;
  std::string job_store_addr;
};

// Joins a round: the first (last_round -1) or the next one. With etcd, a
// host that cannot be reached is taken as lost: the agent finds (or
// becomes) the next host and joins there.
proto::JoinResponse join(const LaunchOptions& o, Placement& p, int last_round, int restarts);

// The etcd backend: the host of the rounds after `gone` (empty: the first),
// found or become (store_addr, host, server).
void find_etcd_host(const LaunchOptions& o, Placement& p, const std::string& gone);

// Hosts the rendezvous where this node owns the --rdzv address (or is
// --node-rank 0), and joins the first round.
Placement rendezvous(const LaunchOptions& o);

}  // namespace rtd::launcher
