#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "rt_dist/data.h"
#include "rt_dist/error.h"

namespace rtd::data {
namespace {
namespace fs = std::filesystem;

// Records of 8 bytes holding their global index (a uint64).
class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("rtd_data_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::uint64_t first = 0;
    for (std::uint64_t n : {10u, 7u, 13u}) {  // 30 records in 3 files
      files_.push_back((dir_ / ("shard" + std::to_string(files_.size()) + ".bin")).string());
      write_shard(files_.back(), 8, n, [first](std::uint64_t i, unsigned char* out) {
        const std::uint64_t v = first + i;
        std::memcpy(out, &v, 8);
      });
      first += n;
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  LoaderOptions options(int batch, int rank, int world, std::uint64_t seed = 7) {
    return LoaderOptions{.files = files_,
                         .record_bytes = 8,
                         .batch_per_rank = batch,
                         .rank = rank,
                         .world_size = world,
                         .seed = seed};
  }
  static std::vector<std::uint64_t> take(Loader& l, int batch) {
    const unsigned char* p = l.next();
    std::vector<std::uint64_t> out(batch);
    std::memcpy(out.data(), p, 8 * batch);
    return out;
  }
  std::string error_of(const LoaderOptions& o) {
    try {
      Loader l(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::vector<std::string> files_;
};

// Global batches of 6: rank r of 3 (batch 2) or of 2 (batch 3) gets its rows of
// the same global batch, and an epoch covers every record at most once.
TEST_F(LoaderTest, TheGlobalBatchesAreTheSameWhateverTheWorldSize) {
  Loader one(options(6, 0, 1));
  EXPECT_EQ(one.records(), 30u);
  EXPECT_EQ(one.steps_per_epoch(), 5u);
  std::vector<std::unique_ptr<Loader>> three, two;
  for (int r = 0; r < 3; ++r) three.push_back(std::make_unique<Loader>(options(2, r, 3)));
  for (int r = 0; r < 2; ++r) two.push_back(std::make_unique<Loader>(options(3, r, 2)));
  std::set<std::uint64_t> epoch;
  for (int step = 0; step < 5; ++step) {
    auto global = take(one, 6);
    std::vector<std::uint64_t> from3, from2;
    for (auto& l : three)
      for (auto v : take(*l, 2)) from3.push_back(v);
    for (auto& l : two)
      for (auto v : take(*l, 3)) from2.push_back(v);
    EXPECT_EQ(from3, global) << "step " << step;
    EXPECT_EQ(from2, global) << "step " << step;
    epoch.insert(global.begin(), global.end());
  }
  EXPECT_EQ(epoch.size(), 30u) << "every record once in the epoch";
}

TEST_F(LoaderTest, EachEpochHasItsOwnOrderAndTheSeedDecidesIt) {
  Loader a(options(30, 0, 1, 1)), b(options(30, 0, 1, 1)), c(options(30, 0, 1, 2));
  auto a0 = take(a, 30), a1 = take(a, 30);
  EXPECT_EQ(take(b, 30), a0);
  EXPECT_NE(a1, a0) << "epoch 1 is shuffled anew";
  EXPECT_NE(take(c, 30), a0) << "another seed, another order";
  LoaderOptions plain = options(30, 0, 1);
  plain.shuffle = false;
  Loader d(plain);
  auto d0 = take(d, 30);
  for (std::uint64_t i = 0; i < 30; ++i) EXPECT_EQ(d0[i], i);
}

TEST_F(LoaderTest, APositionResumesExactlyWhereItWas) {
  Loader a(options(4, 1, 2));
  for (int i = 0; i < 5; ++i) take(a, 4);  // into the second epoch (3 steps each)
  const std::string at = a.position();
  EXPECT_EQ(at, "1:2");
  std::vector<std::vector<std::uint64_t>> rest;
  for (int i = 0; i < 4; ++i) rest.push_back(take(a, 4));
  Loader b(options(4, 1, 2));
  take(b, 4);  // something prefetched, then moved away from
  b.set_position(at);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(take(b, 4), rest[i]) << i;
  EXPECT_THROW(b.set_position("1:3"), Error);
  EXPECT_THROW(b.set_position("x"), Error);
}

TEST_F(LoaderTest, ManyBatchesThroughFewBuffersAndAGpuOnlyWhenOneWasGiven) {
  // Prefetch 1: two buffers in turn, refilled while a position moves too.
  LoaderOptions o = options(2, 0, 1);
  o.prefetch = 1;
  Loader a(o), b(options(2, 0, 1));
  for (int i = 0; i < 40; ++i) {
    if (i == 17) {
      a.set_position(b.position());
    }
    EXPECT_EQ(take(a, 2), take(b, 2)) << i;
  }
  try {
    a.next_on_device(StreamRef{});
    ADD_FAILURE() << "next_on_device without a GPU returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device_index"), std::string::npos) << e.what();
  }
}

TEST_F(LoaderTest, BadFilesAreNamed) {
  std::string e = error_of(options(4, 0, 1));
  EXPECT_EQ(e, "");
  LoaderOptions o = options(4, 0, 1);
  o.record_bytes = 4;
  e = error_of(o);
  EXPECT_NE(e.find("shard0.bin: records of 8 bytes, the loader expects 4"), std::string::npos) << e;
  fs::resize_file(files_[1], 64 + 7 * 8 - 3);
  e = error_of(options(4, 0, 1));
  EXPECT_NE(e.find("shard1.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("the file is short"), std::string::npos) << e;
  std::ofstream(files_[2]) << "not a shard at all, but long enough to hold a header......."
                              "........";
  e = error_of(o = options(4, 0, 1));
  EXPECT_NE(e.find("shard"), std::string::npos) << e;
  LoaderOptions missing = options(4, 0, 1);
  missing.files = {(dir_ / "nope.bin").string()};
  e = error_of(missing);
  EXPECT_NE(e.find("nope.bin: cannot open it"), std::string::npos) << e;
  LoaderOptions big = options(40, 0, 1);
  big.files = {files_[0]};
  e = error_of(big);
  EXPECT_NE(e.find("fewer than one global batch"), std::string::npos) << e;
}

}  // namespace
}  // namespace rtd::data
