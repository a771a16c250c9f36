// rtd::FSDP with its states offloaded (the optimizer's, the parameters', to a
// file) against the same run keeping them on the device; the fixture is
// fsdp_fixture.h.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "rt_dist/fsdp.h"
#include "tests/multiproc/fsdp_fixture.h"

namespace rtd::testing_util {
namespace {

// Offload (the optimizer, or the parameters too) gives the parameters that
// keeping the states on the device gives, step for step: exactly on the host
// (the host AdamW is the CPU engine's own), within float rounding on a GPU
// (its AdamW kernel and the host's round the same operations apart only
// where the compiler contracts them).
TEST_F(FSDPTest, OffloadingEqualsKeepingTheStatesOnTheDevice) {
  const int n = comm().size();
  const double tol = test_memory().device() == DeviceType::kCpu ? 0.0 : 1e-5;
  for (ShardStrategy s : kAll) {
    for (Offload where : {Offload::kOptimizer, Offload::kParameters, Offload::kNvme}) {
      if (where == Offload::kParameters &&
          (s == ShardStrategy::kZero1 || s == ShardStrategy::kZero2))
        continue;
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        for (bool in_backward : {false, true}) {
          FSDPOptions o = options_for(s, n);
          o.param_dtype = o.reduce_dtype = dtype;
          o.update_in_backward = in_backward;
          FSDP kept = make(o);
          set_offload(o, where);
          o.offload_threads = 2;
          FSDP offloaded = make(o);
          const std::string what =
              std::string(to_string(s)) + " offload " + std::string(to_string(where)) + ", " +
              std::string(to_string(dtype)) + (in_backward ? ", updating in backward" : "");
          for (int step = 0; step < 3; ++step) {
            ASSERT_TRUE(train_step(kept, 1000 * step, 1));
            ASSERT_TRUE(train_step(offloaded, 1000 * step, 1));
            expect_close(params_of(offloaded), params_of(kept), tol,
                         what + ", step " + std::to_string(step + 1));
          }
          EXPECT_EQ(offloaded.steps_taken(), 3);
          EXPECT_GT(offloaded.host_state_bytes(), 0u);
          EXPECT_EQ(kept.host_state_bytes(), 0u);
          EXPECT_LT(offloaded.state_bytes(), kept.state_bytes()) << what;
        }
      }
    }
  }
}

TEST_F(FSDPTest, OffloadingTheParametersNeedsThemSharded) {
  for (ShardStrategy s : {ShardStrategy::kZero1, ShardStrategy::kZero2}) {
    FSDPOptions o = options_for(s, comm().size());
    o.offload = Offload::kParameters;
    try {
      make(o);
      ADD_FAILURE() << "offloading the parameters of " << to_string(s);
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("zero3 or hybrid"), std::string::npos) << e.what();
    }
    EXPECT_THROW(FSDP::plan(kUnits, comm().size(), o), Error);
  }
  Offload parsed = Offload::kNone;
  EXPECT_TRUE(parse_offload("params", &parsed));
  EXPECT_EQ(parsed, Offload::kParameters);
  EXPECT_TRUE(parse_offload("nvme", &parsed));
  EXPECT_EQ(parsed, Offload::kNvme);
  EXPECT_FALSE(parse_offload("nvme ", &parsed));
  EXPECT_FALSE(parse_offload("", &parsed));
  // nvme names the directory it needs, or the one it cannot use.
  FSDPOptions o = options_for(ShardStrategy::kZero3, comm().size());
  o.offload = Offload::kNvme;
  for (const char* dir : {"", "/nonexistent/offload"}) {
    o.offload_dir = dir;
    try {
      make(o);
      ADD_FAILURE() << "offload nvme into '" << dir << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(*dir ? dir : "offload_dir"), std::string::npos)
          << e.what();
    }
  }
}

// Run by tests/multiproc/offload_full_disk.sh with RTD_TEST_FULL_DIR on a
// tmpfs that holds one rank's states file but not two: every rank refuses
// before it allocates, naming the directory, the sizes and the ranks on the
// host (with one rank, the tmpfs must be too small for one file).
TEST_F(FSDPTest, OffloadToAFullDiskIsRefusedOnEveryRank) {
  const char* dir = std::getenv("RTD_TEST_FULL_DIR");
  if (!dir) GTEST_SKIP() << "needs RTD_TEST_FULL_DIR, a small tmpfs (offload_full_disk.sh)";
  FSDPOptions o = options_for(ShardStrategy::kZero3, comm().size());
  o.offload = Offload::kNvme;
  o.offload_dir = dir;
  try {
    make(o);
    ADD_FAILURE() << "the states fit in " << dir;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    for (const std::string& part : {std::string(dir) + " has ", std::string("states' files need")})
      EXPECT_NE(what.find(part), std::string::npos) << "no '" << part << "' in: " << what;
    if (comm().size() > 1) {
      EXPECT_NE(what.find(" ranks on this host)"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace rtd::testing_util
