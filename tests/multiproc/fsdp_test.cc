// rtd::FSDP on N ranks against one process with the whole batch (the fixture,
// fsdp_fixture.h): every strategy, the plan, updating in the backward and the
// delayed update, micro-steps, clipping, bf16 and fp16, and ranks that
// disagree or cannot go on. Offloading: fsdp_offload_test.cc; checkpoints:
// fsdp_checkpoint_test.cc.
#include "rt_dist/fsdp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "rt_dist/checkpoint.h"
#include "sharding/rank_agreement.h"
#include "tests/multiproc/fsdp_fixture.h"

namespace rtd::testing_util {
namespace {

TEST_F(FSDPTest, EveryStrategyOnNRanksEqualsOneRankWithNTimesTheBatch) {
  const int n = comm().size();
  for (ShardStrategy s : kAll) {
    for (bool reshard : {true, false}) {
      if (!reshard && (s == ShardStrategy::kZero1 || s == ShardStrategy::kZero2)) continue;
      FSDPOptions o = options_for(s, n);
      o.reshard_after_forward = reshard;
      FSDP f = make(o);
      Reference ref;
      ref.o = o.adamw;
      ref.o.lr = 1e-2f;
      const std::string what = std::string(to_string(s)) + (reshard ? "" : " without reshard");
      expect_close(params_of(f), ref.p, 0.0, what + " initial (rank 0's)");
      for (int step = 0; step < 4; ++step) {
        ASSERT_TRUE(train_step(f, 1000 * step, 1));
        ref.step(1000 * step, n * kSamplesPerRank);
      }
      expect_close(params_of(f), ref.p, 2e-5, what);
      EXPECT_EQ(f.steps_taken(), 4);
      EXPECT_GT(f.state_bytes(), 0u);
    }
  }
}

// [Memory plan] FSDP::plan, computed without an engine, is what the engine
// allocates: every strategy, with and without resharding, in every dtype
// pair, updating in backward or at the step.
TEST_F(FSDPTest, ThePlanIsWhatTheEngineAllocates) {
  const int n = comm().size();
  for (ShardStrategy s : kAll) {
    for (bool reshard : {true, false}) {
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        for (bool in_backward : {false, true}) {
          for (Offload where :
               {Offload::kNone, Offload::kOptimizer, Offload::kParameters, Offload::kNvme}) {
            FSDPOptions o = options_for(s, n);
            if (where == Offload::kParameters &&
                (s == ShardStrategy::kZero1 || s == ShardStrategy::kZero2))
              continue;
            o.reshard_after_forward = reshard;
            o.param_dtype = dtype;
            o.reduce_dtype = in_backward ? DType::kFloat16 : dtype;
            o.update_in_backward = in_backward;
            set_offload(o, where);
            FSDP f = make(o);
            const FSDPMemoryPlan plan = FSDP::plan(kUnits, n, o);
            EXPECT_EQ(f.state_bytes(), plan.total() + f.scratch_bytes())
                << to_string(s) << (reshard ? "" : " without reshard") << ", " << to_string(dtype)
                << (in_backward ? ", updating in backward" : "") << ", offload " << to_string(where)
                << ":\n"
                << plan.table();
            EXPECT_EQ(f.host_state_bytes(), plan.host_total()) << plan.table();
            EXPECT_EQ(plan.host_total() > 0, where != Offload::kNone);
            EXPECT_EQ(f.disk_state_bytes(), plan.disk_total()) << plan.table();
            EXPECT_EQ(plan.disk_total() > 0, where == Offload::kNvme);
            EXPECT_EQ(plan.shard_ranks, s == ShardStrategy::kHybrid ? o.shard_group_size : n);
          }
        }
      }
    }
  }
  // What the engine refuses, the plan refuses.
  FSDPOptions bad;
  bad.update_in_backward = true;
  bad.max_grad_norm = 1.0f;
  EXPECT_THROW(FSDP::plan(kUnits, n, bad), Error);
  bad = FSDPOptions{.strategy = ShardStrategy::kHybrid, .shard_group_size = n + 1};
  EXPECT_THROW(FSDP::plan(kUnits, n, bad), Error);
  EXPECT_THROW(FSDP::plan({}, n, FSDPOptions{}), Error);
  EXPECT_THROW(FSDP::plan({{10, 0}}, n, FSDPOptions{}), Error);
}

// check_every_rank_can: nothing stops anyone, or the last rank's problem
// stops every rank, named on each.
TEST_F(FSDPTest, ARankThatCannotGoOnStopsEveryRankNamingIt) {
  Store& store = test_context()->store();
  const int n = comm().size(), me = comm().rank();
  EXPECT_NO_THROW(check_every_rank_can(store, "test/can/0/", me, n, "", "who", "advice",
                                       ErrorCategory::kConfig));
  const std::string problem = me == n - 1 ? "its reason" : "";
  try {
    check_every_rank_can(store, "test/can/1/", me, n, problem, "who", "advice",
                         ErrorCategory::kConfig);
    ADD_FAILURE() << "rank " << me << " went on";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_EQ(std::string(e.what()), "who: rank " + std::to_string(n - 1) + ": its reason; advice");
  }
}

// On GPUs, model states that do not fit in a rank's free memory stop every
// rank before anything is allocated or read, naming the rank and the sizes.
TEST_F(FSDPTest, ModelStatesThatDoNotFitStopEveryRankBeforeAnyAllocation) {
  if (test_memory().device() != DeviceType::kCuda)
    GTEST_SKIP() << "host buffers: the check reads a GPU's free memory";
  Placed small(DType::kFloat32, 64);
  BufferView huge = small.view();
  huge.count = std::size_t(1) << 36;  // 256 GiB of fp32 weights: never read
  try {
    FSDP f(comm(), test_context()->store(), {{huge}}, options_for(ShardStrategy::kZero3, 1));
    ADD_FAILURE() << "an engine that cannot fit was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig) << e.what();
    const std::string text = e.what();
    EXPECT_NE(text.find("FSDP: the model states do not fit: rank 0: GPU "), std::string::npos)
        << text;
    EXPECT_NE(text.find("rtd-plan"), std::string::npos) << text;
  }
}

TEST_F(FSDPTest, UpdatingInBackwardEqualsUpdatingAtTheStep) {
  const int n = comm().size();
  for (ShardStrategy s : kAll) {
    FSDPOptions o = options_for(s, n);
    o.update_in_backward = true;
    FSDP f = make(o);
    Reference ref;
    ref.o.lr = 1e-2f;
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(train_step(f, 1000 * step, 1));
      ref.step(1000 * step, n * kSamplesPerRank);
    }
    expect_close(params_of(f), ref.p, 2e-5, std::string(to_string(s)) + " updating in backward");
    EXPECT_EQ(f.steps_taken(), 4);
  }
}

TEST_F(FSDPTest, UpdatingInBackwardRefusesWhatNeedsEveryGradientFirst) {
  for (bool clip : {true, false}) {
    FSDPOptions o;
    o.update_in_backward = true;
    if (clip) o.max_grad_norm = 1.0f;
    if (!clip) o.loss_scale.dynamic = true;
    try {
      make(o);
      ADD_FAILURE() << "update_in_backward with " << (clip ? "clipping" : "loss scaling");
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("update_in_backward"), std::string::npos) << e.what();
    }
  }
  // Two micro-steps: the second backward finds its units already reduced.
  FSDPOptions o;
  o.update_in_backward = true;
  FSDP f = make(o);
  try {
    train_step(f, 0, 2);
    ADD_FAILURE() << "two micro-steps with update_in_backward";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("one micro-step per step"), std::string::npos) << e.what();
  }
  comm().barrier()->wait();
}

// The delayed parameter update: step k computes its gradients at the
// parameters of step k-2 (the initial ones for the first two), and AdamW
// applies them to the newest; a checkpoint holds the newest.
TEST_F(FSDPTest, TheDelayedUpdateTakesGradientsAtParametersOneStepOld) {
  const int n = comm().size();
  for (auto [s, where] : {std::pair{ShardStrategy::kZero3, Offload::kOptimizer},
                          std::pair{ShardStrategy::kHybrid, Offload::kOptimizer},
                          std::pair{ShardStrategy::kZero3, Offload::kNvme}}) {
    FSDPOptions o = options_for(s, n);
    set_offload(o, where);
    o.update_in_backward = true;
    o.delayed_update = true;
    FSDP f = make(o);
    const FSDPMemoryPlan plan = FSDP::plan(kUnits, n, o);
    EXPECT_EQ(f.state_bytes(), plan.total() + f.scratch_bytes()) << plan.table();
    EXPECT_EQ(f.host_state_bytes(), plan.host_total());
    Reference ref;
    ref.o.lr = 1e-2f;
    Params older = ref.p, old = ref.p;  // p(k-2), p(k-1)
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(train_step(f, 1000 * step, 1));
      ref.step(1000 * step, n * kSamplesPerRank, &older);
      older = old;
      old = ref.p;
    }
    const std::string what = std::string(to_string(s)) + " offload " +
                             std::string(to_string(where)) + " with the delayed update";
    expect_close(params_of(f), older, 2e-5, what + ": the next step computes with p(3)");
    std::vector<std::vector<ckpt::Tensor>> names;
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      names.emplace_back();
      for (std::size_t i = 0; i < kUnits[u].size(); ++i)
        names[u].push_back({"p", DType::kFloat32, {static_cast<std::int64_t>(kUnits[u][i])}, {}});
    }
    // The weights of (u, i) come first in unit u's block of 3 x its parameters.
    const ckpt::State state = f.checkpoint_state(names, false);
    std::size_t block = 0;
    for (int u = 0; u < f.unit_count(); ++u) {
      for (std::size_t i = 0; i < kUnits[u].size(); ++i)
        for (const ckpt::Range& r : state.tensors[block + i].ranges)
          for (std::size_t j = 0; j < r.count; ++j)
            ASSERT_NEAR(static_cast<const float*>(r.data)[j], ref.p[u][i][r.first + j],
                        2e-5 * (std::fabs(ref.p[u][i][r.first + j]) + 1.0))
                << what << ": the checkpoint holds p(4)";
      block += 3 * kUnits[u].size();
    }
  }
  FSDPOptions bad = options_for(ShardStrategy::kZero2, n);
  bad.offload = Offload::kOptimizer;
  bad.update_in_backward = bad.delayed_update = true;
  EXPECT_THROW(make(bad), Error);
  EXPECT_THROW(FSDP::plan(kUnits, n, bad), Error);
  bad.strategy = ShardStrategy::kZero3;
  bad.update_in_backward = false;
  EXPECT_THROW(make(bad), Error);
}

TEST_F(FSDPTest, MicroStepsAccumulateIntoOneStep) {
  const int n = comm().size(), micro = 3;
  for (ShardStrategy s : kAll) {
    for (Offload where : {Offload::kNone, Offload::kOptimizer, Offload::kNvme}) {
      FSDPOptions o = options_for(s, n);
      set_offload(o, where);
      FSDP f = make(o);
      Reference ref;
      ref.o.lr = 1e-2f;
      for (int step = 0; step < 2; ++step) {
        train_step(f, 1000 * step, micro);
        ref.step(1000 * step, micro * n * kSamplesPerRank);
      }
      expect_close(
          params_of(f), ref.p, 1e-4,
          std::string(to_string(s)) + " accumulating, offload " + std::string(to_string(where)));
    }
  }
}

TEST_F(FSDPTest, ClippingEqualsClippingTheUnshardedGradients) {
  const int n = comm().size();
  for (ShardStrategy s : kAll)
    for (Offload where : {Offload::kNone, Offload::kOptimizer, Offload::kNvme}) {
      FSDPOptions o = options_for(s, n);
      set_offload(o, where);
      o.max_grad_norm = 0.5f;
      FSDP f = make(o);
      Reference ref;
      ref.o.lr = 1e-2f;
      ref.max_norm = 0.5f;
      for (int step = 0; step < 3; ++step) {
        train_step(f, 1000 * step, 1);
        ref.step(1000 * step, n * kSamplesPerRank);
        ASSERT_GT(ref.last_norm, 0.5f) << "the test must actually clip";
        EXPECT_NEAR(f.last_grad_norm(), ref.last_norm, 1e-4 * ref.last_norm);
      }
      expect_close(
          params_of(f), ref.p, 2e-5,
          std::string(to_string(s)) + " clipped, offload " + std::string(to_string(where)));
    }
}

TEST_F(FSDPTest, AnInfOnOneRankSkipsTheStepOnEveryRankAndBacksOff) {
  const int n = comm().size();
  for (ShardStrategy s : kAll)
    for (Offload where : {Offload::kNone, Offload::kOptimizer, Offload::kNvme}) {
      FSDPOptions o = options_for(s, n);
      set_offload(o, where);
      o.loss_scale = {.dynamic = true, .initial = 1024.0f, .growth_interval = 2};
      FSDP f = make(o);
      Reference ref;
      ref.o.lr = 1e-2f;
      ASSERT_TRUE(train_step(f, 0, 1));
      ref.step(0, n * kSamplesPerRank);
      const Params before = params_of(f);
      EXPECT_FALSE(train_step(f, 1000, 1, /*poison_rank=*/n - 1)) << "the step must be skipped";
      EXPECT_EQ(f.loss_scale(), 512.0f);
      expect_close(params_of(f), before, 0.0,
                   std::string(to_string(s)) + " after the skipped step");
      ASSERT_TRUE(train_step(f, 2000, 1));
      ref.step(2000, n * kSamplesPerRank);
      ASSERT_TRUE(train_step(f, 3000, 1));
      ref.step(3000, n * kSamplesPerRank);
      EXPECT_EQ(f.loss_scale(), 1024.0f) << "two good steps in a row grow it back";
      EXPECT_EQ(f.steps_taken(), 3);
      expect_close(params_of(f), ref.p, 2e-5, std::string(to_string(s)) + " unscaled");
    }
}

TEST_F(FSDPTest, Bf16ParametersAndReductionStayCloseToFloat32) {
  const int n = comm().size();
  for (ShardStrategy s : kAll) {
    FSDPOptions o = options_for(s, n);
    o.param_dtype = DType::kBFloat16;
    o.reduce_dtype = DType::kBFloat16;
    FSDP f = make(o);
    f.pre_forward(0);
    EXPECT_EQ(f.param(0, 0).dtype, DType::kBFloat16);
    f.post_forward(0);
    Reference ref;
    ref.o.lr = 1e-2f;
    for (int step = 0; step < 3; ++step) {
      train_step(f, 1000 * step, 1);
      ref.step(1000 * step, n * kSamplesPerRank);
    }
    expect_close(params_of(f), ref.p, 2e-2, std::string(to_string(s)) + " in bf16");
  }
}

// float16 with dynamic loss scaling, as AMP runs it: a scale of 2^17 makes
// gradients of about 1 overflow float16, so the first step is skipped on every
// rank and the scale backs off; the steps after it follow float32 closely.
TEST_F(FSDPTest, Fp16WithLossScalingSkipsTheOverflowAndStaysCloseToFloat32) {
  const int n = comm().size();
  for (ShardStrategy s : kAll) {
    FSDPOptions o = options_for(s, n);
    o.param_dtype = DType::kFloat16;
    o.reduce_dtype = DType::kFloat16;
    o.loss_scale = {
        .dynamic = true, .initial = 131072.0f, .growth_interval = 1000, .backoff = 0.25f};
    FSDP f = make(o);
    f.pre_forward(0);
    EXPECT_EQ(f.param(0, 0).dtype, DType::kFloat16);
    f.post_forward(0);
    EXPECT_FALSE(train_step(f, 0, 1)) << "gradients times 2^17 overflow float16";
    EXPECT_EQ(f.loss_scale(), 32768.0f);
    EXPECT_EQ(f.steps_taken(), 0);
    Reference ref;
    ref.o.lr = 1e-2f;
    for (int step = 1; step <= 3; ++step) {
      ASSERT_TRUE(train_step(f, 1000 * step, 1)) << "step " << step;
      ref.step(1000 * step, n * kSamplesPerRank);
    }
    expect_close(params_of(f), ref.p, 2e-2, std::string(to_string(s)) + " in float16");
  }
}

TEST_F(FSDPTest, RanksWithDifferentStrategiesFailCleanlyOnEveryRank) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  FSDPOptions o;
  o.strategy = comm().rank() == 1 ? ShardStrategy::kZero2 : ShardStrategy::kZero3;
  try {
    FSDP f = make(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("same units with the same FSDP options"),
              std::string::npos)
        << e.what();
  }
  comm().barrier()->wait();
}

TEST_F(FSDPTest, RanksWithDifferentUnitsFailCleanlyOnEveryRank) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  auto v = views();
  if (comm().rank() == 1) v[2].pop_back();
  try {
    FSDP f(comm(), test_context()->store(), v, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("5,1,4000"), std::string::npos) << e.what();
  }
  comm().barrier()->wait();
}

TEST_F(FSDPTest, HybridGroupsThatDoNotDivideTheWorldAreAConfigurationError) {
  FSDPOptions o;
  o.strategy = ShardStrategy::kHybrid;
  o.shard_group_size = comm().size() + 1;
  try {
    FSDP f = make(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("shard_group_size"), std::string::npos) << e.what();
  }
}

TEST_F(FSDPTest, HooksOutOfOrderAreErrorsNotCorruption) {
  FSDP f = make(options_for(ShardStrategy::kZero3, comm().size()));
  try {
    f.param(1, 0);
    FAIL() << "a sharded unit's parameters are not there before pre_forward";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre_forward"), std::string::npos) << e.what();
  }
  try {
    f.step();
    FAIL() << "a step without backward must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("post_backward"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rtd::testing_util
