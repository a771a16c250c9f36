#include "runtime/env.h"

#include <gtest/gtest.h>

#include "collectives/mpi/mpi_session.h"
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

// Host buffers under mpirun default to Open MPI's collectives (faster there
// than Gloo: docs/mpi.md); an explicit choice, RTD_BACKEND, or another
// launcher keeps its own. (Where a GPU is visible, NCCL comes first.)
TEST(ChooseBackend, MpirunDefaultsToMpiOnHostBuffers) {
  if (usable_gpu_count(nullptr) > 0) GTEST_SKIP() << "a GPU is visible: the default is NCCL";
  const EnvMap mpirun = {{"OMPI_COMM_WORLD_RANK", "0"},
                         {"OMPI_COMM_WORLD_SIZE", "2"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const Config c = Config::from_env(mpirun);
  const WorldInfo w = detect_world(c);
  ASSERT_EQ(w.launcher, "mpirun");
  // The choice asks Open MPI for its thread support (a singleton here, held
  // through the test as the job's store would hold it under mpirun).
  std::shared_ptr<mpi::MpiSession> session;
  try {
    session = mpi::MpiSession::shared();
  } catch (const Error& e) {
    GTEST_SKIP() << "Open MPI cannot start here: " << e.what();
  }
  EXPECT_EQ(choose_backend(c, {}, w), "mpi");
  EXPECT_EQ(choose_backend(c, {.backend = Backend::kGloo}, w), "gloo");
  EnvMap forced = mpirun;
  forced["RTD_BACKEND"] = "gloo";
  EXPECT_EQ(choose_backend(Config::from_env(forced), {}, w), "gloo");
  const Config none = Config::from_env({});
  EXPECT_EQ(choose_backend(none, {}, detect_world(none)), "gloo") << "not under mpirun";
  EXPECT_EQ(choose_backend(none, {.backend = Backend::kMpi}, detect_world(none)), "mpi");
}

}  // namespace
}  // namespace rtd
