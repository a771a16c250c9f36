// Builds the worker environment; torchrun-compatible names plus DTRUN_*.
#include "launcher/worker_env.h"

#include "launcher/python_path.h"

namespace rtd::launcher {

std::vector<std::string> build_worker_env(const WorkerEnvInput& in) {
  EnvMap env = *in.parent;
  const auto& layout = *in.layout;
  const auto& node = layout.node();
  const int nproc = node.nproc();
  auto put = [&](const char* key, const std::string& value) { env[key] = value; };
  put("RANK", std::to_string(node.first_rank() + in.local_rank));
  put("LOCAL_RANK", std::to_string(in.local_rank));
  put("WORLD_SIZE", std::to_string(layout.world_size()));
  put("LOCAL_WORLD_SIZE", std::to_string(nproc));
  put("GROUP_RANK", std::to_string(layout.node_rank()));
  put("GROUP_WORLD_SIZE", std::to_string(layout.nnodes()));
  put("ROLE_RANK", std::to_string(node.first_rank() + in.local_rank));
  put("ROLE_WORLD_SIZE", std::to_string(layout.world_size()));
  put("ROLE_NAME", "default");
  put("MASTER_ADDR", layout.master_addr());
  put("MASTER_PORT", std::to_string(layout.master_port()));
  put("TORCHELASTIC_RESTART_COUNT", std::to_string(in.restarts));
  put("TORCHELASTIC_MAX_RESTARTS", std::to_string(in.max_restarts));
  put("TORCHELASTIC_RUN_ID", layout.run_id());
  put("DTRUN_STORE", in.store_addr);
  put("DTRUN_TOKEN", in.token);
  if (in.tls && in.tls->enabled()) {
    put("DTRUN_TLS_CERT", in.tls->cert);
    put("DTRUN_TLS_KEY", in.tls->key);
    put("DTRUN_TLS_CA", in.tls->ca);
    if (!in.tls->peer_names.empty()) put("DTRUN_TLS_PEER_NAMES", in.tls->peer_names);
  }
  put("DTRUN_ROUND", std::to_string(in.round));
  put("DTRUN_ADDR", in.node_addr);
  if (in.recovery) {
    put("DTRUN_RECOVERY", "in-process");
    put("DTRUN_GENERATION", std::to_string(in.generation));
    if (in.joining) put("DTRUN_RECOVERY_JOIN", "1");
  }
  // As torchrun: several workers of a node would each start a thread per
  // core, so they get one unless told otherwise; a node's only worker keeps
  // every core (PyTorch's host ops, a host optimizer).
  if (nproc > 1 && env.find("OMP_NUM_THREADS") == env.end()) put("OMP_NUM_THREADS", "1");
  if (!in.python_dir.empty()) {
    auto it = env.find("PYTHONPATH");
    put("PYTHONPATH", python_path_with(in.python_dir, it == env.end() ? "" : it->second));
  }
  if (in.overrides) {
    for (const auto& [key, value] : *in.overrides) env[key] = value;
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [key, value] : env) out.push_back(key + "=" + value);
  return out;
}

}  // namespace rtd::launcher
