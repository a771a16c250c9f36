// rtd::FSDP on the ranks dtrun started (Gloo with host buffers, or NCCL with GPU
// buffers in gpu_collectives_test): for every strategy, N ranks training on B
// samples each must follow the trajectory of one process training on all N*B
// samples with the same AdamW, which every rank computes serially here as the
// reference (our DDP is held to the same reference gradients in ddp_test.cc).
// One file past 700 lines: every case shares the fixture, its train_step and
// the serial reference, which is what makes the cases comparable.
#include "rt_dist/fsdp.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include "rt_dist/checkpoint.h"
#include "sharding/rank_agreement.h"
#include "tests/multiproc/world.h"

namespace rtd::testing_util {
namespace {

// Three units; sizes that divide by no world size and a one-element parameter.
const std::vector<std::vector<std::size_t>> kUnits = {{1000, 7}, {301}, {5, 1, 4000}};
constexpr int kSamplesPerRank = 2;

float initial(std::size_t u, std::size_t i, std::size_t j) {
  return 0.5f * std::cos(0.3f * static_cast<float>(u) + 0.7f * static_cast<float>(i) +
                         0.013f * static_cast<float>(j));
}
// Gradient of sample s for element j of parameter (u, i) at parameter value p:
// depends on the parameter, so that the trajectory depends on every update.
float sample_grad(int s, std::size_t u, std::size_t i, std::size_t j, float p) {
  return 0.1f * static_cast<float>(s % 3) * p +
         std::sin(0.37f * s + 0.11f * static_cast<float>(u * 7 + i) + 0.0007f * j);
}

using Params = std::vector<std::vector<std::vector<float>>>;  // [unit][param][element]

Params initial_params() {
  Params p(kUnits.size());
  for (std::size_t u = 0; u < kUnits.size(); ++u)
    for (std::size_t i = 0; i < kUnits[u].size(); ++i)
      for (std::size_t j = 0; j < kUnits[u][i]; ++j)
        p[u].resize(kUnits[u].size()), p[u][i].push_back(initial(u, i, j));
  return p;
}

// Mean gradient over samples [first, first + n), times scale.
std::vector<float> mean_grad(std::size_t u, std::size_t i, const std::vector<float>& p, int first,
                             int n, float scale) {
  std::vector<float> g(p.size(), 0.0f);
  for (int s = first; s < first + n; ++s)
    for (std::size_t j = 0; j < p.size(); ++j) g[j] += sample_grad(s, u, i, j, p[j]) * scale / n;
  return g;
}

// The reference: one process, the whole batch, plain AdamW, optional clipping.
struct Reference {
  Params p = initial_params(), m, v;
  AdamWOptions o;
  float max_norm = 0.0f;
  float last_norm = 0.0f;
  int t = 0;
  Reference() {
    m = v = p;
    for (auto& unit : m)
      for (auto& x : unit) std::fill(x.begin(), x.end(), 0.0f);
    v = m;
  }
  // at: the parameters the gradients are taken at (the delayed update's); null: p.
  void step(int first, int n, const Params* at = nullptr) {
    Params g = p;
    double sum = 0.0;
    for (std::size_t u = 0; u < p.size(); ++u)
      for (std::size_t i = 0; i < p[u].size(); ++i) {
        g[u][i] = mean_grad(u, i, at ? (*at)[u][i] : p[u][i], first, n, 1.0f);
        for (float x : g[u][i]) sum += double(x) * x;
      }
    last_norm = static_cast<float>(std::sqrt(sum));
    const float coef = max_norm > 0.0f ? std::min(1.0f, max_norm / (last_norm + 1e-6f)) : 1.0f;
    ++t;
    const float bc1 = 1.0f - std::pow(o.beta1, float(t)), bc2 = 1.0f - std::pow(o.beta2, float(t));
    for (std::size_t u = 0; u < p.size(); ++u)
      for (std::size_t i = 0; i < p[u].size(); ++i)
        for (std::size_t j = 0; j < p[u][i].size(); ++j) {
          const float gj = g[u][i][j] * coef;
          float& mj = m[u][i][j];
          float& vj = v[u][i][j];
          float& pj = p[u][i][j];
          mj = o.beta1 * mj + (1.0f - o.beta1) * gj;
          vj = o.beta2 * vj + (1.0f - o.beta2) * gj * gj;
          pj *= 1.0f - o.lr * o.weight_decay;
          pj -= o.lr * (mj / bc1) / (std::sqrt(vj / bc2) + o.eps);
        }
  }
};

class FSDPTest : public WorldTest {
 protected:
  void SetUp() override {
    WorldTest::SetUp();
    if (IsSkipped()) return;
    Params init = initial_params();
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      units_.emplace_back();
      for (std::size_t i = 0; i < kUnits[u].size(); ++i) {
        // Rank 0's values must win: the others start elsewhere.
        auto placed = std::make_unique<Placed>(DType::kFloat32, kUnits[u][i]);
        for (std::size_t j = 0; j < kUnits[u][i]; ++j)
          placed->host.set(j, comm().rank() == 0 ? init[u][i][j] : 9.0);
        placed->push();
        units_[u].push_back(std::move(placed));
      }
    }
  }
  std::vector<std::vector<BufferView>> views() {
    std::vector<std::vector<BufferView>> out;
    for (auto& unit : units_) {
      out.emplace_back();
      for (auto& p : unit) out.back().push_back(p->view());
    }
    return out;
  }
  FSDP make(FSDPOptions o) {
    o.adamw.lr = 1e-2f;  // large enough that a wrong step shows
    return FSDP(comm(), test_context()->store(), views(), o);
  }
  std::vector<float> read(const BufferView& b) {
    std::vector<float> out(b.count);
    if (b.dtype == DType::kFloat32) {
      test_memory().to_host(out.data(), b.data, b.bytes());
      return out;
    }
    std::vector<std::uint16_t> bits(b.count);
    test_memory().to_host(bits.data(), b.data, b.bytes());
    for (std::size_t j = 0; j < bits.size(); ++j)
      out[j] = b.dtype == DType::kBFloat16 ? bf16_to_float(bits[j]) : f16_to_float(bits[j]);
    return out;
  }
  void write(const BufferView& b, const std::vector<float>& values) {
    if (b.dtype == DType::kFloat32) {
      test_memory().to_device(b.data, values.data(), b.bytes());
      return;
    }
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t j = 0; j < bits.size(); ++j)
      bits[j] = b.dtype == DType::kBFloat16 ? float_to_bf16(values[j]) : float_to_f16(values[j]);
    test_memory().to_device(b.data, bits.data(), b.bytes());
  }
  // One step of `micro` micro-steps; this rank's samples of micro-step k start
  // at first + (k * n + rank) * kSamplesPerRank. poison: a rank and element to set to inf.
  bool train_step(FSDP& f, int first, int micro, int poison_rank = -1) {
    const int n = comm().size(), r = comm().rank();
    for (int k = 0; k < micro; ++k) {
      const int mine = first + (k * n + r) * kSamplesPerRank;
      Params seen(kUnits.size());
      for (int u = 0; u < f.unit_count(); ++u) {
        f.pre_forward(u);
        for (std::size_t i = 0; i < kUnits[u].size(); ++i) seen[u].push_back(read(f.param(u, i)));
        f.post_forward(u);
      }
      for (int u = f.unit_count() - 1; u >= 0; --u) {
        f.pre_backward(u);
        for (std::size_t i = 0; i < kUnits[u].size(); ++i) {
          EXPECT_EQ(read(f.param(u, i)), seen[u][i]) << "backward sees forward's parameters";
          auto g = mean_grad(u, i, seen[u][i], mine, kSamplesPerRank, f.loss_scale() / micro);
          if (r == poison_rank && u == 1 && k == micro - 1)
            g[3] = std::numeric_limits<float>::infinity();
          write(f.grad(u, i), g);
        }
        f.post_backward(u);
      }
    }
    return f.step();
  }
  Params params_of(FSDP& f) {
    Params out(kUnits.size());
    for (int u = 0; u < f.unit_count(); ++u) {
      f.pre_forward(u);
      for (std::size_t i = 0; i < kUnits[u].size(); ++i) out[u].push_back(read(f.param(u, i)));
      f.post_forward(u);
    }
    return out;
  }
  void expect_close(const Params& got, const Params& want, double tol, const std::string& what) {
    for (std::size_t u = 0; u < want.size(); ++u)
      for (std::size_t i = 0; i < want[u].size(); ++i)
        for (std::size_t j = 0; j < want[u][i].size(); ++j)
          ASSERT_NEAR(got[u][i][j], want[u][i][j], tol * (std::fabs(want[u][i][j]) + 1.0))
              << what << ": unit " << u << " parameter " << i << " element " << j;
  }

  std::vector<std::vector<std::unique_ptr<Placed>>> units_;
};

const ShardStrategy kAll[] = {ShardStrategy::kZero1, ShardStrategy::kZero2, ShardStrategy::kZero3,
                              ShardStrategy::kHybrid};

// Hybrid groups of two where the world splits into them, else one group.
FSDPOptions options_for(ShardStrategy s, int world) {
  FSDPOptions o;
  o.strategy = s;
  if (s == ShardStrategy::kHybrid) o.shard_group_size = world % 2 == 0 ? 2 : world;
  return o;
}

// o offloaded to `where` (kNvme: its file in the test's temporary directory).
void set_offload(FSDPOptions& o, Offload where) {
  o.offload = where;
  o.offload_dir = where == Offload::kNvme ? ::testing::TempDir() : "";
}

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
