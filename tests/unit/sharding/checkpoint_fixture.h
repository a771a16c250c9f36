// The fixture of the checkpoint tests: ranks as threads sharing a store, a
// model of two tensors whose values say their step, and ways to damage files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "rt_dist/checkpoint.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"

namespace rtd::ckpt {
namespace fs = std::filesystem;

// Runs fn(rank) on n threads sharing one store, as n ranks would.
inline void run_ranks(int n, const std::function<void(Store&, int)>& fn,
                      std::shared_ptr<Store> store = make_memory_store()) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*store, r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("rtd_ckpt_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Options options(int keep = 3, std::size_t piece_bytes = 64u << 20) {
    return Options{.dir = dir_.string(), .keep_last = keep, .piece_bytes = piece_bytes};
  }

  // The model: "w" float32 [10, 7], "m" int64 [33]; element i of each is i + step.
  static float w_at(std::size_t i, int step) { return static_cast<float>(i) * 0.5f + step; }
  static std::int64_t m_at(std::size_t i, int step) {
    return static_cast<std::int64_t>(i) * 3 + step;
  }

  // Saves `step` from `ranks` ranks, each holding an even slice of both tensors.
  void save(int ranks, int step, Options o) {
    run_ranks(ranks, [&](Store& store, int rank) {
      std::vector<float> w(70);
      std::vector<std::int64_t> m(33);
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = w_at(i, step);
      for (std::size_t i = 0; i < m.size(); ++i) m[i] = m_at(i, step);
      auto slice = [&](std::size_t n) {
        const std::size_t lo = n * rank / ranks, hi = n * (rank + 1) / ranks;
        return std::pair{lo, hi - lo};
      };
      auto [wl, wn] = slice(70);
      auto [ml, mn] = slice(33);
      State s;
      s.tensors.push_back(Tensor{"w", DType::kFloat32, {10, 7}, {{wl, wn, w.data() + wl}}});
      s.tensors.push_back(Tensor{"m", DType::kInt64, {33}, {{ml, mn, m.data() + ml}}});
      s.meta["loss_scale"] = "1024";
      s.meta["data_position"] = std::to_string(step * 8);
      Checkpointer(store, rank, ranks, o).save(step, s);
    });
  }

  // Loads on `ranks` ranks, each asking for an uneven part (rank r: the
  // elements i with i % ranks == r, as single-element ranges, and one
  // contiguous block): checks every value; returns the step loaded.
  std::int64_t load_and_check(int ranks, int expect_step, bool fallback = true) {
    std::vector<std::int64_t> steps(ranks, -1);
    run_ranks(ranks, [&](Store& store, int rank) {
      std::vector<float> w(70, -1.0f);
      std::vector<std::int64_t> m(33, -1);
      State s;
      Tensor tw{"w", DType::kFloat32, {10, 7}, {}};
      for (std::size_t i = rank; i < 70; i += ranks) tw.ranges.push_back({i, 1, &w[i]});
      s.tensors.push_back(tw);
      const std::size_t lo = 33 * rank / ranks, hi = 33 * (rank + 1) / ranks;
      s.tensors.push_back(Tensor{"m", DType::kInt64, {33}, {{lo, hi - lo, m.data() + lo}}});
      auto step = Checkpointer(store, rank, ranks, options()).load(s, fallback);
      ASSERT_TRUE(step.has_value());
      steps[rank] = *step;
      for (std::size_t i = rank; i < 70; i += ranks) EXPECT_EQ(w[i], w_at(i, expect_step)) << i;
      for (std::size_t i = lo; i < hi; ++i) EXPECT_EQ(m[i], m_at(i, expect_step)) << i;
      EXPECT_EQ(s.meta["data_position"], std::to_string(expect_step * 8));
    });
    for (auto s : steps) EXPECT_EQ(s, steps[0]);
    return steps[0];
  }

  void flip_byte(const fs::path& file, std::size_t offset) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
  }

  std::string load_error(int ranks, bool fallback) {
    try {
      load_and_check(ranks, 0, fallback);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

}  // namespace rtd::ckpt
