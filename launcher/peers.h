// Peers: what an agent learns of the other nodes of its round, and how the
// nodes end a round alike. Through the heartbeat (heartbeats.h): the job's
// failure, this round's failure (restart where restarts are left), a new
// round forming (rejoin), a lost host. Through the store, under
// "dtrun/round<R>/": when each node's first worker failed (to blame the first
// cause), how many nodes' workers are done, and how many are leaving.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launcher/heartbeats.h"
#include "launcher/supervisor.h"
#include "rt_dist/store.h"

namespace rtd::launcher {

// The job's failure: "code|reason", set once by the node that ends the job.
inline constexpr const char* kJobFailedKey = "dtrun/failed";
std::string round_key(int round, const std::string& what);

class Peers {
 public:
  // host_replaceable: the etcd backend, where a lost host is replaced (the
  // round ends as for a membership change) instead of ending the job.
  Peers(std::shared_ptr<Store> store, std::unique_ptr<HeartbeatClient> heartbeats,
        bool host_replaceable = false);

  // Beats for this round and state (heartbeats.h): what ends the round's
  // workers, if anything.
  std::optional<Outcome> check(int round, int node_rank, NodeState state);
  // A worker failed on this node: records when, waits a moment for the other
  // nodes' records, and names the earliest failure as the cause.
  Outcome first_cause(int round, int node_rank, int nnodes, Outcome mine);
  // What ends the round within `wait` (check(), polled): a worker of this node
  // failed, perhaps because a node was lost, which the host says within a
  // second or two of its dtrun's end.
  std::optional<Outcome> wait_for_news(int round, int node_rank, std::chrono::milliseconds wait);
  // Records this round's failure (restarts left: every node rejoins) or the job's.
  void record_failure(int round, int node_rank, const Outcome& out, bool job);
  // This node's workers all succeeded: waits until every node's did, or
  // returns what ended the wait (a failure, a signal, a lost host).
  std::optional<Outcome> meet_done(int round, int node_rank, int nnodes);
  // The job succeeded everywhere: the host (node 0) keeps the store up until
  // every node has read so (at most a few seconds), the others say they leave.
  void leave(int round, int node_rank, int nnodes, bool host);

 private:
  Outcome lost_host(const std::string& why) const;

  std::shared_ptr<Store> store_;
  std::unique_ptr<HeartbeatClient> heartbeats_;
  const bool host_replaceable_;
};

}  // namespace rtd::launcher
