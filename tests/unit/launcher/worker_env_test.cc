#include "launcher/worker_env.h"

#include <gtest/gtest.h>

namespace rtd::launcher {
namespace {

std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

TEST(WorkerEnv, TorchrunAndDtrunVariablesForTheSecondNode) {
  proto::JoinResponse layout;
  layout.set_node_rank(1);
  layout.set_world_size(8);
  layout.set_master_addr("10.0.0.1");
  layout.set_master_port(4000);
  layout.set_run_id("job7");
  layout.set_nnodes(2);
  layout.mutable_node()->set_node_rank(1);
  layout.mutable_node()->set_nproc(4);
  layout.mutable_node()->set_first_rank(4);
  EnvMap parent{{"PATH", "/bin"}, {"NCCL_NVLS_ENABLE", "0"}, {"RANK", "stale"}};
  std::vector<std::pair<std::string, std::string>> overrides{{"NCCL_DEBUG", "INFO"},
                                                             {"OMP_NUM_THREADS", "4"}};
  auto env = as_map(build_worker_env(WorkerEnvInput{.parent = &parent,
                                                    .layout = &layout,
                                                    .local_rank = 2,
                                                    .store_addr = "10.0.0.1:29500",
                                                    .token = "tok",
                                                    .node_addr = "10.0.0.2",
                                                    .round = 1,
                                                    .restarts = 1,
                                                    .max_restarts = 3,
                                                    .overrides = &overrides}));
  EXPECT_EQ(env["RANK"], "6");
  EXPECT_EQ(env["LOCAL_RANK"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["ROLE_RANK"], "6");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "4000");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "1");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
  EXPECT_EQ(env["DTRUN_STORE"], "10.0.0.1:29500");
  EXPECT_EQ(env["DTRUN_TOKEN"], "tok");
  EXPECT_EQ(env["DTRUN_ROUND"], "1");
  EXPECT_EQ(env["DTRUN_ADDR"], "10.0.0.2");
  EXPECT_EQ(env["NCCL_NVLS_ENABLE"], "0") << "the agent's environment is inherited";
  EXPECT_EQ(env["NCCL_DEBUG"], "INFO");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4") << "--env wins";
  EXPECT_EQ(env["PATH"], "/bin");
}

// As torchrun: one thread each for several workers of a node; a node's only
// worker keeps the default (every core).
TEST(WorkerEnv, OmpNumThreadsIsOneForSeveralWorkersOfANode) {
  for (int nproc : {1, 2}) {
    proto::JoinResponse layout;
    layout.set_world_size(nproc);
    layout.set_nnodes(1);
    layout.mutable_node()->set_nproc(nproc);
    EnvMap parent;
    auto env = as_map(build_worker_env(WorkerEnvInput{.parent = &parent, .layout = &layout}));
    if (nproc == 1) {
      EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u) << "a node's only worker";
    } else {
      EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    }
  }
}

}  // namespace
}  // namespace rtd::launcher
