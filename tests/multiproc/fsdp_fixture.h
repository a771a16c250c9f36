// The fixture of rtd::FSDP's tests on the ranks dtrun started (Gloo with host
// buffers, or NCCL with GPU buffers in gpu_collectives_test): for every
// strategy, N ranks training on B samples each must follow the trajectory of
// one process training on all N*B samples with the same AdamW, which every
// rank computes serially here as the reference (Reference; our DDP is held to
// the same reference gradients in ddp_test.cc). The cases are in
// fsdp_test.cc (strategies, precision, failures), fsdp_offload_test.cc and
// fsdp_checkpoint_test.cc; they share this fixture, its train_step and the
// serial reference, which is what makes them comparable.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "rt_dist/fsdp.h"
#include "tests/multiproc/world.h"
#include "tests/testing/float_io.h"

namespace rtd::testing_util {

// Three units; sizes that divide by no world size and a one-element parameter.
inline const std::vector<std::vector<std::size_t>> kUnits = {{1000, 7}, {301}, {5, 1, 4000}};
inline constexpr int kSamplesPerRank = 2;

inline float initial(std::size_t u, std::size_t i, std::size_t j) {
  return 0.5f * std::cos(0.3f * static_cast<float>(u) + 0.7f * static_cast<float>(i) +
                         0.013f * static_cast<float>(j));
}
// Gradient of sample s for element j of parameter (u, i) at parameter value p:
// depends on the parameter, so that the trajectory depends on every update.
inline float sample_grad(int s, std::size_t u, std::size_t i, std::size_t j, float p) {
  return 0.1f * static_cast<float>(s % 3) * p +
         std::sin(0.37f * s + 0.11f * static_cast<float>(u * 7 + i) + 0.0007f * j);
}

using Params = std::vector<std::vector<std::vector<float>>>;  // [unit][param][element]

inline Params initial_params() {
  Params p(kUnits.size());
  for (std::size_t u = 0; u < kUnits.size(); ++u)
    for (std::size_t i = 0; i < kUnits[u].size(); ++i)
      for (std::size_t j = 0; j < kUnits[u][i]; ++j)
        p[u].resize(kUnits[u].size()), p[u][i].push_back(initial(u, i, j));
  return p;
}

// Mean gradient over samples [first, first + n), times scale.
inline std::vector<float> mean_grad(std::size_t u, std::size_t i, const std::vector<float>& p,
                                    int first, int n, float scale) {
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
  std::vector<float> read(const BufferView& b) { return read_floats(test_memory(), b); }
  void write(const BufferView& b, const std::vector<float>& values) {
    write_floats(test_memory(), b, values);
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

inline constexpr ShardStrategy kAll[] = {ShardStrategy::kZero1, ShardStrategy::kZero2,
                                         ShardStrategy::kZero3, ShardStrategy::kHybrid};

// Hybrid groups of two where the world splits into them, else one group.
inline FSDPOptions options_for(ShardStrategy s, int world) {
  FSDPOptions o;
  o.strategy = s;
  if (s == ShardStrategy::kHybrid) o.shard_group_size = world % 2 == 0 ? 2 : world;
  return o;
}

// o offloaded to `where` (kNvme: its file in the test's temporary directory).
inline void set_offload(FSDPOptions& o, Offload where) {
  o.offload = where;
  o.offload_dir = where == Offload::kNvme ? ::testing::TempDir() : "";
}

}  // namespace rtd::testing_util
