// rtd::FSDP's checkpoints: one strategy's shards resumed in every strategy,
// and an offloaded run resumed on the device and back; the fixture is
// fsdp_fixture.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "rt_dist/checkpoint.h"
#include "rt_dist/fsdp.h"
#include "tests/multiproc/fsdp_fixture.h"

namespace rtd::testing_util {
namespace {

// A checkpoint of one strategy's shards (weights and AdamW's moments, on the
// host or the GPU) resumes in every strategy: 2 steps, save, load into a
// fresh engine, 2 more steps equal 4 steps of the reference.
class FSDPCheckpointTest : public FSDPTest {
 protected:
  void SetUp() override {
    FSDPTest::SetUp();
    if (IsSkipped()) return;
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      names_.emplace_back();
      for (std::size_t i = 0; i < kUnits[u].size(); ++i)
        names_[u].push_back(ckpt::Tensor{"u" + std::to_string(u) + ".p" + std::to_string(i),
                                         DType::kFloat32,
                                         {static_cast<std::int64_t>(kUnits[u][i])},
                                         {}});
    }
    ref_.o.lr = 1e-2f;
    for (int step = 0; step < 4; ++step) ref_.step(1000 * step, comm().size() * kSamplesPerRank);
  }
  // Saved by an engine with options a, resumed by engines with each of bs.
  void save_then_resume(const FSDPOptions& a, const std::vector<FSDPOptions>& bs,
                        const std::string& what) {
    const int n = comm().size();
    Store& store = test_context()->store();
    // Every rank the same directory: rank 0 names it.
    const std::string key = "fsdp_ckpt_dir/" + std::to_string(round_++);
    if (comm().rank() == 0)
      store.set(key, ::testing::TempDir() + "rtd_fsdp_ckpt_" + std::to_string(getpid()) + "_" +
                         std::to_string(round_));
    const std::string dir = store.get(key, std::chrono::seconds(30));
    {
      FSDP f = make(a);
      for (int step = 0; step < 2; ++step) ASSERT_TRUE(train_step(f, 1000 * step, 1));
      ckpt::Checkpointer(store, comm().rank(), n, {.dir = dir})
          .save(2, f.checkpoint_state(names_, true));
    }
    for (const FSDPOptions& b : bs) {
      FSDP g = make(b);
      ckpt::State state = g.checkpoint_state(names_, false);
      auto step = ckpt::Checkpointer(store, comm().rank(), n, {.dir = dir}).load(state, false);
      ASSERT_EQ(step, std::optional<std::int64_t>(2));
      g.after_load(state);
      EXPECT_EQ(g.steps_taken(), 2);
      for (int s2 = 2; s2 < 4; ++s2) ASSERT_TRUE(train_step(g, 1000 * s2, 1));
      expect_close(params_of(g), ref_.p, 2e-5,
                   what + " saved, " + std::string(to_string(b.strategy)) + " offload " +
                       std::string(to_string(b.offload)) + " resumed");
    }
    comm().barrier()->wait();
    if (comm().rank() == 0) std::filesystem::remove_all(dir);
  }

  std::vector<std::vector<ckpt::Tensor>> names_;
  Reference ref_;
  int round_ = 0;
};

TEST_F(FSDPCheckpointTest, ACheckpointOfEveryStrategyResumesInEveryStrategy) {
  const int n = comm().size();
  std::vector<FSDPOptions> every;
  for (ShardStrategy b : kAll) every.push_back(options_for(b, n));
  for (ShardStrategy a : kAll)
    save_then_resume(options_for(a, n), every, std::string(to_string(a)));
}

// The offloaded states are checkpoints like any: an offloaded run resumes in
// one that keeps them on the device, and back.
TEST_F(FSDPCheckpointTest, AnOffloadedRunResumesOnTheDeviceAndBack) {
  const int n = comm().size();
  FSDPOptions resident = options_for(ShardStrategy::kZero3, n);
  FSDPOptions optimizer = resident, params = resident;
  optimizer.offload = Offload::kOptimizer;
  params.offload = Offload::kParameters;
  FSDPOptions zero2 = options_for(ShardStrategy::kZero2, n);
  zero2.offload = Offload::kOptimizer;
  save_then_resume(optimizer, {resident, params, zero2}, "zero3 offload optimizer");
  save_then_resume(resident, {optimizer, params}, "zero3 on the device");
  save_then_resume(params, {resident, zero2}, "zero3 offload params");
  FSDPOptions nvme = resident, zero1_nvme = options_for(ShardStrategy::kZero1, n);
  set_offload(nvme, Offload::kNvme);
  set_offload(zero1_nvme, Offload::kNvme);
  save_then_resume(nvme, {resident, optimizer, zero1_nvme}, "zero3 offload nvme");
  save_then_resume(resident, {nvme}, "zero3 on the device, resumed offloaded to nvme");
}

// Updating each unit during backward, as soon as its gradient is reduced,
// follows the same trajectory as updating all of them in step().

}  // namespace
}  // namespace rtd::testing_util
