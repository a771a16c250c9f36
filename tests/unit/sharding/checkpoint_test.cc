#include "rt_dist/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <thread>

#include "rt_dist/error.h"
#include "sharding/checkpoint/crc32c.h"

namespace rtd::ckpt {
namespace {
namespace fs = std::filesystem;

TEST(Crc32c, StandardCheckValueAndIncremental) {
  const char text[] = "123456789";
  EXPECT_EQ(crc32c(text, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(text + 4, 5, crc32c(text, 4)), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720, B.4
}

// Runs fn(rank) on n threads sharing one store, as n ranks would.
void run_ranks(int n, const std::function<void(Store&, int)>& fn) {
  auto store = make_memory_store();
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

TEST_F(CheckpointTest, NothingSavedLoadsNothing) {
  run_ranks(2, [&](Store& store, int rank) {
    State s;
    EXPECT_FALSE(Checkpointer(store, rank, 2, options()).load(s).has_value());
  });
}

TEST_F(CheckpointTest, SavedByFourLoadsOnOneTwoThreeAndFive) {
  save(4, 7, options());
  EXPECT_TRUE(fs::exists(dir_ / "step_00000007" / "manifest.json"));
  EXPECT_TRUE(fs::exists(dir_ / "step_00000007" / "rank_00003.bin"));
  for (int ranks : {1, 2, 3, 5}) EXPECT_EQ(load_and_check(ranks, 7), 7) << ranks << " ranks";
}

TEST_F(CheckpointTest, SmallPiecesAreReadAndCheckedOneByOne) {
  save(2, 3, options(3, 16));  // 4 floats or 2 int64 per piece
  EXPECT_EQ(load_and_check(3, 3), 3);
}

TEST_F(CheckpointTest, OverlappingSavedRangesLoadWithAnyNumberOfIoThreads) {
  // Two replicas that both saved all of "w" in 12-byte pieces, one of them
  // shifted: every element is stored twice, in pieces that straddle each other.
  run_ranks(2, [&](Store& store, int rank) {
    std::vector<float> w(70);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = w_at(i, 5);
    State s;
    Tensor t{"w", DType::kFloat32, {10, 7}, {}};
    if (rank == 0) t.ranges.push_back({0, 70, w.data()});
    if (rank == 1) t.ranges = {{1, 69, w.data() + 1}, {0, 1, w.data()}};
    s.tensors.push_back(t);
    s.tensors.push_back(Tensor{"m", DType::kInt64, {33}, {}});
    Options o = options(3, 12);
    o.io_threads = 3;
    Checkpointer(store, rank, 2, o).save(5, s);
  });
  for (int threads : {1, 2, 8}) {
    run_ranks(1, [&](Store& store, int rank) {
      std::vector<float> w(70, -1.0f);
      State s;
      s.tensors.push_back(Tensor{"w", DType::kFloat32, {10, 7}, {{3, 60, w.data() + 3}}});
      Options o = options();
      o.io_threads = threads;
      ASSERT_EQ(Checkpointer(store, rank, 1, o).load(s), 5);
      for (std::size_t i = 0; i < 70; ++i)
        EXPECT_EQ(w[i], i >= 3 && i < 63 ? w_at(i, 5) : -1.0f) << i << ", " << threads;
    });
  }
}

TEST_F(CheckpointTest, KeepsTheLastKAndPointsLatestAtTheNewest) {
  for (int step : {1, 2, 3, 4, 5}) save(2, step, options(2));
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::int64_t>{5, 4}));
  std::ifstream latest(dir_ / "latest");
  std::string text;
  latest >> text;
  EXPECT_EQ(text, "step_00000005");
  EXPECT_EQ(load_and_check(2, 5), 5);
}

// A crash in the middle of a save leaves step_<S>.tmp behind: it is never
// loaded, and the next save of that step replaces it.
TEST_F(CheckpointTest, AnUnfinishedSaveIsIgnoredAndTheNextOneReplacesIt) {
  save(2, 1, options());
  fs::create_directories(dir_ / "step_00000002.tmp");
  std::ofstream(dir_ / "step_00000002.tmp" / "rank_00000.bin") << "half";
  EXPECT_EQ(load_and_check(2, 1), 1);
  save(2, 2, options());
  EXPECT_FALSE(fs::exists(dir_ / "step_00000002.tmp"));
  EXPECT_EQ(load_and_check(2, 2), 2);
}

TEST_F(CheckpointTest, ACorruptedPieceIsNamedAndTheOneBeforeIsLoadedWithFallback) {
  save(2, 1, options());
  save(2, 2, options());
  flip_byte(dir_ / "step_00000002" / "rank_00001.bin", 5);
  const std::string error = load_error(2, false);
  EXPECT_NE(error.find("rank_00001.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("tensor 'w'"), std::string::npos) << error;
  EXPECT_NE(error.find("CRC-32C"), std::string::npos) << error;
  EXPECT_NE(error.find("corrupted"), std::string::npos) << error;
  EXPECT_EQ(load_and_check(2, 1), 1) << "with fallback, step 1";
}

TEST_F(CheckpointTest, ATruncatedOrMissingFileIsNamed) {
  save(2, 1, options());
  fs::resize_file(dir_ / "step_00000001" / "rank_00000.bin", 10);
  std::string error = load_error(1, false);
  EXPECT_NE(error.find("rank_00000.bin is truncated"), std::string::npos) << error;
  fs::remove(dir_ / "step_00000001" / "rank_00000.bin");
  error = load_error(1, false);
  EXPECT_NE(error.find("rank_00000.bin"), std::string::npos) << error;
}

TEST_F(CheckpointTest, ANewerFormatAndAMismatchedModelAreClearErrors) {
  save(1, 1, options());
  const fs::path manifest = dir_ / "step_00000001" / "manifest.json";
  std::ifstream in(manifest);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const std::string newer =
      std::string(json).replace(json.find("\"format_version\": 1"), 19, "\"format_version\": 2");
  std::ofstream(manifest) << newer;
  std::string error = load_error(1, false);
  EXPECT_NE(error.find("format version 2"), std::string::npos) << error;
  std::ofstream(manifest) << json;
  run_ranks(1, [&](Store& store, int rank) {
    std::vector<float> w(70);
    State s;
    s.tensors.push_back(Tensor{"w", DType::kFloat32, {7, 10}, {{0, 70, w.data()}}});
    try {
      Checkpointer(store, rank, 1, options()).load(s, false);
      ADD_FAILURE() << "a shape mismatch loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor 'w' is float32 10x7 there, but the model's is "
                                           "float32 7x10"),
                std::string::npos)
          << e.what();
    }
    s.tensors[0].name = "v";
    s.tensors[0].shape = {10, 7};
    try {
      Checkpointer(store, rank, 1, options()).load(s, false);
      ADD_FAILURE() << "a missing tensor loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has no tensor 'v'"), std::string::npos) << e.what();
    }
  });
}

TEST_F(CheckpointTest, ARankThatCannotWriteFailsTheSaveOnEveryRank) {
  EXPECT_THROW(
      run_ranks(2,
                [&](Store& store, int rank) {
                  std::vector<float> w(70);
                  State s;
                  // rank 1's range lies outside the tensor
                  s.tensors.push_back(
                      Tensor{"w", DType::kFloat32, {10, 7}, {{rank == 1 ? 69u : 0u, 2, w.data()}}});
                  Checkpointer(store, rank, 2, options()).save(1, s);
                }),
      Error);
  EXPECT_TRUE(list_checkpoints(dir_.string()).empty()) << "nothing committed";
}

// The state is copied at the call: changing it afterwards does not change
// what is saved; the save's error comes back at the next call.
TEST_F(CheckpointTest, AnAsyncSaveKeepsTheStateOfTheCallAndReportsItsErrorLater) {
  run_ranks(2, [&](Store& store, int rank) {
    std::vector<float> w(70);
    std::vector<std::int64_t> m(33);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = w_at(i, 4);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = m_at(i, 4);
    State s;
    s.tensors.push_back(
        Tensor{"w", DType::kFloat32, {10, 7}, {{35u * rank, 35, w.data() + 35 * rank}}});
    s.tensors.push_back(Tensor{"m", DType::kInt64, {33}, {{0, rank == 0 ? 33u : 0u, m.data()}}});
    s.meta["data_position"] = "32";
    Checkpointer c(store, rank, 2, options());
    c.save_async(4, s);
    std::fill(w.begin(), w.end(), -7.0f);  // training goes on
    c.wait();
  });
  EXPECT_EQ(load_and_check(3, 4), 4);
  // A save that cannot be written (the directory is a file) fails at wait().
  fs::remove_all(dir_);
  std::ofstream(dir_.string()) << "not a directory";
  run_ranks(1, [&](Store& store, int rank) {
    std::vector<float> w(70);
    State s;
    s.tensors.push_back(Tensor{"w", DType::kFloat32, {10, 7}, {{0, 70, w.data()}}});
    Checkpointer c(store, rank, 1, options());
    c.save_async(1, s);
    EXPECT_THROW(c.wait(), Error);
    c.wait();  // reported once
  });
  fs::remove(dir_);
}

}  // namespace
}  // namespace rtd::ckpt
