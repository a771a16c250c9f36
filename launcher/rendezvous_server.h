// RendezvousServer: the gRPC server that node rank 0's agent hosts: the job's
// key-value Store, and the Rendezvous that forms the rounds and hears the
// members' heartbeats. Rejects calls without the job token. See
// docs/rendezvous.md for the protocol.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/heartbeats.h"
#include "launcher/membership.h"
#include "runtime/core/store/store_service.h"
#include "runtime/core/tls_files.h"

namespace rtd::launcher {

struct ServerOptions {
  std::string bind_ip;  // the --rdzv host's address, or 0.0.0.0 with --rdzv-bind-all
  int port = 0;         // 0: any free port
  std::string token;
  int min_nodes = 1;  // --nnodes=MIN:MAX (both nnodes when fixed)
  int max_nodes = 1;
  int nproc_per_node = 1;
  std::string fingerprint;  // of the rest of the configuration
  int master_port = 0;      // the free port on node 0 handed to workers as MASTER_PORT
  std::chrono::milliseconds last_call{0};  // with a range: wait this long for more after MIN
  std::chrono::milliseconds heartbeat_timeout{30000};  // a member silent this long is lost
  std::string host_node_id;  // the hosting agent's node_id: node rank 0 is its alone
  TlsFiles tls;              // mutual TLS (requires and verifies the callers' certificates)
  StoreServiceLimits store_limits;
  // The etcd backend: the job's running round when this host takes over from
  // one that was lost, and what records each round that starts (called off
  // the server's locks; an error is logged, and the round goes on).
  std::optional<ResumeFrom> resume;
  std::function<void(const proto::RoundRecord&)> on_round;
};

class RendezvousServer {
 public:
  // Starts listening; throws rtd::Error(kConfig) when the address cannot be bound.
  explicit RendezvousServer(const ServerOptions& options);
  ~RendezvousServer();
  int port() const;
  void shutdown();
  // The heartbeat of the host's own agent, answered in this process (and
  // never held): it keeps what it needs alive, so it may outlive the server
  // (its answers then carry the job's end: its failure, or the shutdown).
  InProcessBeat in_process_beat() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace rtd::launcher
