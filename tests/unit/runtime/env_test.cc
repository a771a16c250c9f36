#include "runtime/env.h"

#include <gtest/gtest.h>

#include "rt_dist/error.h"

namespace rtd {
namespace {

WorldInfo detect(const EnvMap& env) { return detect_world(Config::from_env(env)); }

void expect_config_error(const EnvMap& env, const std::string& needle) {
  try {
    detect(env);
    ADD_FAILURE() << "expected rtd::Error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DetectWorld, NoVariablesIsAWorldOfOne) {
  WorldInfo w = detect({});
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.launcher, "none");
}

TEST(DetectWorld, DtrunVariables) {
  WorldInfo w = detect({{"RANK", "5"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "4"},
                        {"GROUP_RANK", "1"},
                        {"DTRUN_STORE", "h:1"}});
  EXPECT_EQ(w.launcher, "dtrun");
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.node_rank, 1);
}

TEST(DetectWorld, TorchrunVariablesWithoutOurStore) {
  WorldInfo w = detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}});
  EXPECT_EQ(w.launcher, "torchrun");
}

TEST(DetectWorld, RankNotBelowWorldSizeIsAnError) {
  expect_config_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}},
                      "RANK=4 must be less than WORLD_SIZE=4");
}

TEST(DetectWorld, LocalRankNotBelowLocalWorldSizeIsAnError) {
  expect_config_error(
      {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
      "LOCAL_RANK=2");
}

TEST(DetectWorld, RankWithoutWorldSizeIsAnError) {
  expect_config_error({{"RANK", "1"}}, "WORLD_SIZE is not set");
}

TEST(DetectWorld, OpenMpiAndSlurm) {
  WorldInfo m = detect({{"OMPI_COMM_WORLD_RANK", "3"},
                        {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(m.launcher, "mpirun");
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.node_rank, 1);
  WorldInfo s = detect({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_NODEID", "1"}});
  EXPECT_EQ(s.launcher, "slurm");
  EXPECT_EQ(s.world_size, 3);
  expect_config_error({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "3"}}, "SLURM_PROCID=3");
}

}  // namespace
}  // namespace rtd
