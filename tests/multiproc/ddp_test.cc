// rtd::DDP on the ranks dtrun started (Gloo with host buffers, or NCCL with GPU
// buffers in gpu_collectives_test): N ranks with B samples each must produce
// the gradient of the whole batch of N*B samples, which every rank also
// computes serially as the reference.
#include "rt_dist/ddp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tests/multiproc/world.h"
#include "tests/testing/float_io.h"

namespace rtd::testing_util {
namespace {

// Parameter sizes that make several buckets with the small caps below.
const std::vector<std::size_t> kSizes = {1000, 7, 300000, 5, 64, 40000};
constexpr int kSamplesPerRank = 3;

// The gradient of parameter k, element j, for global sample s: any fixed
// function will do, since the loss is a mean over samples.
float sample_grad(int s, std::size_t k, std::size_t j) {
  return std::sin(0.37f * s + 0.11f * static_cast<float>(k) + 0.0007f * static_cast<float>(j));
}

// Mean gradient over global samples [first, first + n), scaled.
std::vector<float> mean_grad(std::size_t k, int first, int n, float scale = 1.0f) {
  std::vector<float> g(kSizes[k], 0.0f);
  for (int s = first; s < first + n; ++s) {
    for (std::size_t j = 0; j < g.size(); ++j) g[j] += sample_grad(s, k, j) * scale / n;
  }
  return g;
}

class DDPTest : public WorldTest {
 protected:
  void SetUp() override {
    WorldTest::SetUp();
    if (IsSkipped()) return;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      params_.push_back(std::make_unique<Placed>(DType::kFloat32, kSizes[k]));
      for (std::size_t j = 0; j < kSizes[k]; ++j) params_.back()->host.set(j, comm().rank() + 0.5);
      params_.back()->push();
    }
  }
  std::vector<BufferView> views() {
    std::vector<BufferView> v;
    for (auto& p : params_) v.push_back(p->view());
    return v;
  }
  DDP make(DDPOptions options = {}) {
    options.first_bucket_mb = 0.001;
    options.bucket_mb = 0.5;
    return DDP(comm(), test_context()->store(), views(), options);
  }
  // Writes values into parameter k's gradient (through the host, in the gradient's dtype).
  void write_grad(DDP& ddp, std::size_t k, const std::vector<float>& values, bool accumulate) {
    BufferView g = ddp.grad(static_cast<int>(k));
    std::vector<float> current = accumulate ? read_grad(ddp, k) : std::vector<float>(g.count, 0.0f);
    for (std::size_t j = 0; j < values.size(); ++j) current[j] += values[j];
    write_floats(test_memory(), g, current);
  }
  std::vector<float> read_grad(DDP& ddp, std::size_t k) {
    return read_floats(test_memory(), ddp.grad(static_cast<int>(k)));
  }
  void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                    const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t j = 0; j < got.size(); ++j) {
      // Terms are of size 1 and may cancel: the tolerance scales with them.
      ASSERT_NEAR(got[j], want[j], rel * (std::fabs(want[j]) + 1.0)) << what << " element " << j;
    }
  }
  // Marks gradients ready in a rank-dependent order: buckets must still start in order.
  std::vector<std::size_t> shuffled_order() {
    std::vector<std::size_t> order(kSizes.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = order.size() - 1 - k;
    std::mt19937 rng(1234 + comm().rank());
    std::shuffle(order.begin(), order.end(), rng);
    return order;
  }

  std::vector<std::unique_ptr<Placed>> params_;
};

TEST_F(DDPTest, ParametersAreBroadcastFromRankZero) {
  DDP ddp = make();
  for (auto& p : params_) {
    p->pull();
    EXPECT_EQ(p->host.get(3), 0.5) << "rank 0's value";
  }
  EXPECT_GE(ddp.bucket_count(), 3);
}

TEST_F(DDPTest, NRanksEqualOneRankWithNTimesTheBatch) {
  struct Variant {
    DType grads, wire;
    bool registered, copy_engines;
  };
  const std::vector<Variant> variants = {
      {DType::kFloat32, DType::kFloat32, false, true},
      {DType::kFloat32, DType::kBFloat16, false, true},
      {DType::kFloat32, DType::kFloat32, true, true},
      {DType::kFloat32, DType::kBFloat16, true, true},
      {DType::kFloat32, DType::kFloat32, false, false},
      {DType::kFloat32, DType::kBFloat16, false, false},
      // bf16 gradients, reduced as they are or through a float32 wire.
      {DType::kBFloat16, DType::kBFloat16, false, true},
      {DType::kBFloat16, DType::kBFloat16, true, true},
      {DType::kBFloat16, DType::kBFloat16, false, false},
      {DType::kBFloat16, DType::kFloat32, false, true},
      // float16 likewise, and float32 gradients on a float16 wire.
      {DType::kFloat16, DType::kFloat16, false, true},
      {DType::kFloat16, DType::kFloat16, true, true},
      {DType::kFloat16, DType::kFloat16, false, false},
      {DType::kFloat16, DType::kFloat32, false, true},
      {DType::kFloat32, DType::kFloat16, false, true},
  };
  for (const Variant& v : variants) {
    DDP ddp = make(DDPOptions{.grad_dtype = v.grads,
                              .reduce_dtype = v.wire,
                              .register_buckets = v.registered,
                              .copy_engines = v.copy_engines});
    // Only NCCL has registered memory; Gloo falls back to plain buckets.
    const bool nccl = comm().backend() == "nccl";
    EXPECT_EQ(ddp.buckets_registered(), v.registered && nccl);
    EXPECT_EQ(ddp.grad(2).dtype, v.grads);
    EXPECT_EQ(ddp.bucket_bytes(0) % dtype_size(v.grads), 0u);
    // Copy engines need memory other processes can map, which registered memory is not.
    EXPECT_EQ(ddp.reduce_method(), nccl && comm().size() > 1 && v.copy_engines && !v.registered
                                       ? "copy engines"
                                       : "all_reduce");
    // bfloat16 keeps 8 bits of mantissa, float16 11.
    const bool bf16 = v.grads == DType::kBFloat16 || v.wire == DType::kBFloat16;
    const bool f16 = v.grads == DType::kFloat16 || v.wire == DType::kFloat16;
    const double tolerance = bf16 ? 2e-2 : f16 ? 3e-3 : 1e-5;
    const int n = comm().size(), r = comm().rank();
    for (int step = 0; step < 3; ++step) {
      ddp.zero_grad();
      for (std::size_t k : shuffled_order()) {
        write_grad(ddp, k, mean_grad(k, 100 * step + r * kSamplesPerRank, kSamplesPerRank), false);
        ddp.grad_ready(static_cast<int>(k));
      }
      ddp.finish();
      for (std::size_t k = 0; k < kSizes.size(); ++k) {
        expect_close(read_grad(ddp, k), mean_grad(k, 100 * step, n * kSamplesPerRank), tolerance,
                     std::string(to_string(v.grads)) + " gradients on a " +
                         std::string(to_string(v.wire)) + " wire" +
                         (v.registered ? " registered" : "") + " by " + ddp.reduce_method() +
                         " step " + std::to_string(step) + " param " + std::to_string(k));
      }
    }
  }
}

TEST_F(DDPTest, WaitGradGivesEachReducedGradientBeforeFinish) {
  for (DType wire : {DType::kFloat32, DType::kBFloat16}) {
    DDP ddp = make(DDPOptions{.reduce_dtype = wire});
    const int n = comm().size(), r = comm().rank();
    try {
      ddp.wait_grad(0);
      ADD_FAILURE() << "wait_grad before the bucket started must be an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    }
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      write_grad(ddp, k, mean_grad(k, r * kSamplesPerRank, kSamplesPerRank), false);
      ddp.grad_ready(static_cast<int>(k));
    }
    // Last parameters first, as an optimizer overlapping the last buckets would.
    for (int k = static_cast<int>(kSizes.size()) - 1; k >= 0; --k) {
      ddp.wait_grad(k);
      expect_close(read_grad(ddp, k), mean_grad(k, 0, n * kSamplesPerRank),
                   wire == DType::kBFloat16 ? 2e-2 : 1e-5, "param " + std::to_string(k));
    }
    ddp.finish();
    expect_close(read_grad(ddp, 1), mean_grad(1, 0, n * kSamplesPerRank),
                 wire == DType::kBFloat16 ? 2e-2 : 1e-5, "after finish");
  }
}

TEST_F(DDPTest, NoSyncOverKMicroStepsEqualsKTimesTheBatch) {
  DDP ddp = make();
  const int n = comm().size(), r = comm().rank(), k_steps = 3;
  ddp.zero_grad();
  for (int micro = 0; micro < k_steps; ++micro) {
    ddp.set_no_sync(micro < k_steps - 1);
    // Micro-batch `micro` of this rank: samples laid out rank-major per micro-step.
    int first = micro * n * kSamplesPerRank + r * kSamplesPerRank;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      write_grad(ddp, k, mean_grad(k, first, kSamplesPerRank, 1.0f / k_steps), true);
      ddp.grad_ready(static_cast<int>(k));
    }
    ddp.finish();
  }
  for (std::size_t k = 0; k < kSizes.size(); ++k) {
    expect_close(read_grad(ddp, k), mean_grad(k, 0, k_steps * n * kSamplesPerRank), 1e-4,
                 "param " + std::to_string(k));
  }
}

TEST_F(DDPTest, GradientThatNeverBecameReadyIsAnErrorNamingIt) {
  DDP ddp = make();
  for (std::size_t k = 0; k < kSizes.size(); ++k) {
    if (k != 2) ddp.grad_ready(static_cast<int>(k));
  }
  try {
    ddp.finish();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("parameters 2 never became ready"), std::string::npos)
        << e.what();
  }
  comm().barrier()->wait();
}

TEST_F(DDPTest, UnusedParametersCountAsZeroWhenAsked) {
  DDP ddp = make(DDPOptions{.find_unused_parameters = true});
  for (std::size_t k = 0; k < kSizes.size(); ++k)
    write_grad(ddp, k, std::vector<float>(kSizes[k], 1.0f), false);
  for (std::size_t k = 0; k < kSizes.size(); ++k) {
    if (k != 4) ddp.grad_ready(static_cast<int>(k));
  }
  ddp.finish();
  EXPECT_EQ(read_grad(ddp, 4), std::vector<float>(kSizes[4], 0.0f));
  EXPECT_EQ(read_grad(ddp, 5)[9], 1.0f);
}

TEST_F(DDPTest, RanksWithDifferentOptionsFailCleanlyOnEveryRank) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  try {
    DDP ddp = make(DDPOptions{.copy_engines = comm().rank() != 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("same DDP options"), std::string::npos) << e.what();
  }
  comm().barrier()->wait();
}

TEST_F(DDPTest, RanksWithDifferentGradientDtypesFailCleanlyOnEveryRank) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  try {
    DDP ddp = make(DDPOptions{.grad_dtype = comm().rank() == 1 ? DType::kBFloat16 : DType::kFloat32,
                              .reduce_dtype = DType::kBFloat16});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("bfloat16 gradients"), std::string::npos) << e.what();
  }
  comm().barrier()->wait();
}

TEST_F(DDPTest, GradientDtypeOtherThanAFloatTypeIsRejected) {
  try {
    DDP ddp = make(DDPOptions{.grad_dtype = DType::kFloat64});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("grad_dtype"), std::string::npos) << e.what();
  }
}

TEST_F(DDPTest, RanksWithDifferentModelsFailCleanlyOnEveryRank) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<BufferView> v = views();
  if (comm().rank() == 1) v.pop_back();
  try {
    DDP ddp(comm(), test_context()->store(), v);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("every rank must build the same model"), std::string::npos)
        << e.what();
  }
  comm().barrier()->wait();
}

}  // namespace
}  // namespace rtd::testing_util
