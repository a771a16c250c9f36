// The environment each worker starts with: the agent's own, then torchrun's
// variables, dtrun's, and the --env overrides (DESIGN.md, "Worker environment").
#pragma once

#include <string>
#include <vector>

#include "rendezvous.pb.h"
#include "runtime/core/config.h"

namespace rtd::launcher {

struct WorkerEnvInput {
  const EnvMap* parent = nullptr;  // the agent's environment
  const proto::JoinResponse* layout = nullptr;
  int local_rank = 0;
  std::string store_addr;  // host:port of the gRPC store
  std::string token;
  const TlsFiles* tls = nullptr;  // the node's, passed on (its workers' store client speaks TLS)
  std::string node_addr;          // this node's address for CPU collectives
  int round = 0;                  // the rendezvous round: the workers' store prefix
  int restarts = 0;               // failure restarts spent so far
  int max_restarts = 0;
  bool recovery = false;  // --recovery=in-process
  int generation = 0;     // with recovery: the generation a (replacement) worker starts in
  bool joining = false;   // with recovery: a newcomer node's worker (its state comes from others)
  const std::vector<std::pair<std::string, std::string>>* overrides = nullptr;
  std::string python_dir;  // put first on PYTHONPATH (the rt_dist package), unless ""
};

// KEY=VALUE strings, sorted by key.
std::vector<std::string> build_worker_env(const WorkerEnvInput& in);

}  // namespace rtd::launcher
