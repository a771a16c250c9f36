// Where this node stands in the job: it hosts the rendezvous (node rank 0)
// or joins it, and its place in the round (proto::JoinResponse). Shared by
// the agent and `dtrun doctor` across nodes.
#pragma once

#include <memory>
#include <string>

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
};

// Joins a round: the first (last_round -1) or the next one.
proto::JoinResponse join(const LaunchOptions& o, const Placement& p, int last_round, int restarts);

// Hosts the rendezvous where this node owns the --rdzv address (or is
// --node-rank 0), and joins the first round.
Placement rendezvous(const LaunchOptions& o);

}  // namespace rtd::launcher
