// Flag parsing for dtrun with CLI11, then the cross-flag checks CLI11 cannot express.
#include "launcher/options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <set>

#include "launcher/net.h"

namespace rtd::launcher {
namespace {

constexpr const char* kExamples = R"(
Examples:
  dtrun --nproc-per-node=4 ./train --steps 100
  # two nodes: the same line on each; node rank 0 hosts the rendezvous
  dtrun --nproc-per-node=8 --nnodes=2 --node-rank=0 --rdzv=10.0.0.1:29500 --token=$TOK ./train
  dtrun --nproc-per-node=8 --nnodes=2 --node-rank=1 --rdzv=10.0.0.1:29500 --token=$TOK ./train
  dtrun --nproc-per-node=2 --env NCCL_DEBUG=INFO --max-restarts=3 ./train

Workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...)
plus DTRUN_STORE, DTRUN_TOKEN and DTRUN_ROUND. Exit status: the first failing
worker's exit code; 2 for bad flags; 1 for a failed rendezvous.)";

// Flags that take a value as the next argument when written without '='.
const std::set<std::string> kValueFlags = {
    "--nproc-per-node",    "--nproc_per_node", "--nnodes",        "--node-rank",
    "--node_rank",         "--rdzv",           "--rdzv-endpoint", "--rdzv_endpoint",
    "--rdzv-timeout",      "--rdzv_timeout",   "--max-restarts",  "--max_restarts",
    "--grace-period",      "--log-dir",        "--log_dir",       "--env",
    "--heartbeat-timeout", "--token"};

// Index of the first argument that belongs to the program (or of "--").
int find_program(int argc, const char* const* argv) {
  int i = 1;
  while (i < argc) {
    std::string a = argv[i];
    if (a == "--" || a.empty() || a[0] != '-') return i;
    i += (a.find('=') == std::string::npos && kValueFlags.count(a)) ? 2 : 1;
  }
  return std::min(i, argc);
}

std::string parse_endpoint(const std::string& text, LaunchOptions& o) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return "--rdzv '" + text + "' must be host:port, e.g. --rdzv=10.0.0.1:29500";
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string port = text.substr(colon + 1);
  int value = 0;
  try {
    size_t used = 0;
    value = std::stoi(port, &used);
    if (used != port.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    return "--rdzv '" + text + "': port '" + port + "' is not a number";
  }
  if (value < 1 || value > 65535) return "--rdzv '" + text + "': port must be in 1..65535";
  o.rdzv_host = host;
  o.rdzv_port = value;
  o.rdzv_given = true;
  return "";
}

std::string check(LaunchOptions& o, const std::string& rdzv, const std::vector<std::string>& env,
                  const std::string& env_token) {
  if (!rdzv.empty()) {
    std::string err = parse_endpoint(rdzv, o);
    if (!err.empty()) return err;
  }
  if (o.node_rank >= o.nnodes) {
    return "--node-rank=" + std::to_string(o.node_rank) +
           " must be less than --nnodes=" + std::to_string(o.nnodes);
  }
  if (o.nnodes > 1 && !o.rdzv_given) {
    return "--nnodes=" + std::to_string(o.nnodes) +
           " needs --rdzv=host:port naming node rank 0's host";
  }
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return "--env '" + kv + "' must be KEY=VALUE";
    o.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (o.token.empty()) o.token = env_token;
  if (o.token.empty()) {
    if (o.nnodes > 1) {
      return "--nnodes > 1 needs a job token shared by every node: pass --token=SECRET "
             "(or set DTRUN_TOKEN) on each node";
    }
    o.token = random_token();
  }
  return "";
}

}  // namespace

ParseResult parse_options(int argc, const char* const* argv, const std::string& env_token) {
  LaunchOptions o;
  std::string rdzv;
  std::vector<std::string> env;
  int rdzv_timeout_s = 600;
  int grace_s = 5;
  int heartbeat_s = 30;

  CLI::App app{"dtrun: start one worker per GPU (or CPU slot) on each node and supervise them",
               "dtrun"};
  app.footer(kExamples);
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node, "workers on this node")
      ->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", o.nnodes, "nodes in the job")->check(CLI::Range(1, 65536));
  app.add_option("--node-rank,--node_rank", o.node_rank,
                 "this node's rank; node rank 0 hosts the rendezvous")
      ->check(CLI::Range(0, 65535));
  app.add_option("--rdzv,--rdzv-endpoint,--rdzv_endpoint", rdzv,
                 "host:port of the rendezvous (node rank 0's address)");
  app.add_flag("--rdzv-bind-all", o.rdzv_bind_all,
               "node rank 0 listens on every interface, not only the --rdzv host's");
  app.add_option("--rdzv-timeout,--rdzv_timeout", rdzv_timeout_s,
                 "seconds to wait for every node to join")
      ->check(CLI::Range(1, 86400));
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "restarts of all local workers after a failure")
      ->check(CLI::Range(0, 1000));
  app.add_option("--grace-period", grace_s,
                 "seconds between SIGTERM and SIGKILL when stopping workers")
      ->check(CLI::Range(0, 3600));
  app.add_option("--heartbeat-timeout", heartbeat_s,
                 "seconds node rank 0 waits on a node it no longer hears from")
      ->check(CLI::Range(1, 86400));
  app.add_option("--log-dir,--log_dir", o.log_dir, "also write each worker's output to files here");
  app.add_option("--env", env, "KEY=VALUE for every worker (repeatable)");
  app.add_option("--token", o.token, "job token every control-plane call carries (DTRUN_TOKEN)");

  // dtrun's flags end where the program begins; CLI11 sees only dtrun's part.
  const int program_at = find_program(argc, argv);
  try {
    app.parse(program_at, argv);
  } catch (const CLI::CallForHelp&) {
    return ParseResult{.exit_code = 0, .message = app.help()};
  } catch (const CLI::ParseError& e) {
    return ParseResult{.exit_code = 2,
                       .message = std::string("dtrun: ") + e.what() + "\nRun dtrun --help."};
  }
  std::vector<std::string> rest(argv + program_at, argv + argc);
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) {
    return ParseResult{.exit_code = 2,
                       .message =
                           "dtrun: no program given\nUsage: dtrun [flags] program "
                           "[args...]; run dtrun --help."};
  }
  o.program = rest.front();
  o.args.assign(rest.begin() + 1, rest.end());
  o.rdzv_timeout = std::chrono::seconds(rdzv_timeout_s);
  o.grace_period = std::chrono::seconds(grace_s);
  o.heartbeat_timeout = std::chrono::seconds(heartbeat_s);
  std::string err = check(o, rdzv, env, env_token);
  if (!err.empty()) return ParseResult{.exit_code = 2, .message = "dtrun: " + err};
  return ParseResult{.options = std::move(o)};
}

}  // namespace rtd::launcher
