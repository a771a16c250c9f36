#include "rt_dist/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <thread>

#include "rt_dist/error.h"
#include "sharding/checkpoint/crc32c.h"
#include "tests/unit/sharding/checkpoint_fixture.h"

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

// The CPU's instruction and the tables agree at every length and alignment.
TEST(Crc32c, TheInstructionAndTheTablesAgree) {
  std::vector<unsigned char> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  EXPECT_EQ(crc32c_tables("123456789", 9), 0xE3069283u);
  for (std::size_t at : {0, 1, 3, 7}) {
    for (std::size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 900}) {
      const std::uint32_t seed = static_cast<std::uint32_t>(n * 2654435761u);
      EXPECT_EQ(crc32c(data.data() + at, n, seed), crc32c_tables(data.data() + at, n, seed))
          << "at " << at << ", " << n << " bytes, " << crc32c_kind();
    }
  }
}

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

// Each I/O thread writes a file of its own (writers of one file wait for
// each other in the kernel); a rank with fewer pieces than threads writes
// fewer files. The files load on any number of ranks.
TEST_F(CheckpointTest, ARankWritesAFileForEachIoThread) {
  Options o = options(3, 16);  // 70 floats: 18 pieces for one rank, 9 for each of two
  o.io_threads = 4;
  save(2, 5, o);
  const fs::path step = dir_ / "step_00000005";
  for (const char* name : {"rank_00000.bin", "rank_00000.1.bin", "rank_00000.2.bin",
                           "rank_00000.3.bin", "rank_00001.3.bin"})
    EXPECT_TRUE(fs::exists(step / name)) << name;
  EXPECT_FALSE(fs::exists(step / "rank_00000.4.bin"));
  for (int ranks : {1, 3}) EXPECT_EQ(load_and_check(ranks, 5), 5) << ranks << " ranks";
  o.io_threads = 8;
  o.piece_bytes = 64u << 20;  // one piece a tensor: two files a rank
  save(2, 6, o);
  EXPECT_TRUE(fs::exists(dir_ / "step_00000006" / "rank_00001.1.bin"));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000006" / "rank_00001.2.bin"));
  EXPECT_EQ(load_and_check(2, 6), 6);
}

// A directory removed under the running job is made (and locked) again by
// the next save, which then loads.
TEST_F(CheckpointTest, ADirectoryRemovedUnderTheJobIsMadeAgain) {
  run_ranks(2, [&](Store& store, int rank) {
    Checkpointer c(store, rank, 2, options());
    std::vector<float> w(70, 1.0f);
    State s;
    s.tensors.push_back(
        Tensor{"w", DType::kFloat32, {10, 7}, {{35u * rank, 35, w.data() + 35 * rank}}});
    c.save(1, s);
    if (rank == 0) {
      fs::remove_all(dir_);
      store.set("removed", "1");
    }
    store.get("removed", std::chrono::seconds(30));
    c.save(2, s);
    std::vector<float> got(70, 0.0f);
    State l;
    l.tensors.push_back(Tensor{"w", DType::kFloat32, {10, 7}, {{0, 70, got.data()}}});
    EXPECT_EQ(c.load(l), 2);
    EXPECT_EQ(got[69], 1.0f);
  });
  EXPECT_TRUE(fs::exists(dir_ / ".lock"));
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
      std::string(json).replace(json.find("\"format_version\": 2"), 19, "\"format_version\": 3");
  std::ofstream(manifest) << newer;
  std::string error = load_error(1, false);
  EXPECT_NE(error.find("format version 3"), std::string::npos) << error;
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
