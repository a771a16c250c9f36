// Heartbeats: an agent of a running round keeps one call open to the
// rendezvous host. The host holds it for the hold time and answers at once
// when there is news: the job failed, a new round forms (rejoin), or a store
// key the agent watches (a failure in its round) appeared. A call that comes
// back is sent again, so each agent costs the host one call per hold time,
// and news reaches it within the host's tick (100 ms). The host finds silent
// members itself (membership.h); a call that fails tells the agent that the
// host is lost. The host's own agent beats in process instead
// (RendezvousServer::in_process_beat): no load on the server's gRPC, which
// strangers share, can starve its liveness or its news.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/membership.h"
#include "rendezvous.pb.h"
#include "runtime/core/tls_files.h"

namespace rtd::launcher {

// How long the host holds a heartbeat: a third of the timeout, so that a
// node is heard from at least twice before it counts as silent. 4,096 agents
// at the default 30 s timeout make ~410 calls/s.
std::chrono::milliseconds heartbeat_hold(std::chrono::milliseconds timeout);

struct HeartbeatReply {
  std::string failure;
  bool rejoin = false;
  std::string change;  // with rejoin: why a new round forms
  bool loss = false;   // with rejoin: only because members were lost
  std::map<std::string, std::string> values;
  std::string lost;  // non-empty: the host did not answer (why)
};

// A heartbeat answered at once, in the host's own process: empty when the
// request is answered, else why it was refused.
using InProcessBeat =
    std::function<std::string(const proto::HeartbeatRequest&, proto::HeartbeatResponse*)>;

class HeartbeatClient {
 public:
  // Every call gives up after its hold plus half the timeout.
  // secret: the agent's (JoinResponse.agent_secret), carried by every call.
  // in_process: the host's own agent beats through it, every tick, not
  // through gRPC (address is then only named in messages).
  HeartbeatClient(const std::string& address, const std::string& token, const std::string& secret,
                  std::chrono::milliseconds timeout, const TlsFiles& tls = {},
                  InProcessBeat in_process = {});
  ~HeartbeatClient();
  // Beat for this round, as this node, in this state, watching these keys.
  // A change cancels the call in flight and forgets the news of the last.
  void watch(int round, int node_rank, NodeState state, const std::vector<std::string>& keys);
  // The news for what is watched, once there is some (it stays until watch() changes).
  std::optional<HeartbeatReply> news();
  // One call answered at once, outside the loop (a node saying it leaves).
  HeartbeatReply beat_now(int round, int node_rank, NodeState state);

 private:
  struct Impl;
  void loop();

  std::unique_ptr<Impl> impl_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace rtd::launcher
