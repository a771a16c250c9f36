// StateFile (offload nvme): units of different sizes, more of them than the
// window holds, stepped in the orders the host optimizer steps them (backward's,
// step()'s, and an order that changes), each read ahead as the optimizer
// does; every unit must hold what was last written to it, seen through the
// window and through the mapping; and a directory that cannot hold the file
// is named with the sizes.
#include "sharding/state_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "rt_dist/error.h"

namespace rtd {
namespace {

// Sizes that are not multiples of 4 KiB, one of a single element.
const std::vector<std::size_t> kShard = {1000, 1, 7000, 3000, 9000, 5, 4096, 8345, 999, 6000, 5000};

float value(int k, int u, std::size_t j, int version) {
  return static_cast<float>(version * 1000003 + k * 7919 + u * 104729) + 0.25f * (j % 64);
}

// Steps every unit in `order` (version += 1 each time a unit is stepped),
// reading ahead `ahead` units as the optimizer does (-k: k units, guessed
// wrong, which must not keep the window's slots from the units asked for);
// checks what it reads.
void step_in_order(StateFile& f, const std::vector<int>& order, std::vector<int>& version,
                   int ahead) {
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int u = order[i];
    const StateFile::Unit s = f.acquire(u);
    for (int k = 1; k <= ahead && i + k < order.size(); ++k) f.prefetch(order[i + k]);
    for (int k = 1; k <= -ahead; ++k) f.prefetch((u + 2 + k) % static_cast<int>(kShard.size()));
    float* arrays[] = {s.master, s.m, s.v};
    for (int k = 0; k < 3; ++k) {
      for (std::size_t j = 0; j < kShard[u]; ++j) {
        ASSERT_EQ(arrays[k][j], value(k, u, j, version[u])) << "unit " << u << " array " << k;
        arrays[k][j] = value(k, u, j, version[u] + 1);
      }
    }
    ++version[u];
    f.release(u);
  }
}

void expect_mapped(StateFile& f, const std::vector<int>& version) {
  for (int u = 0; u < static_cast<int>(kShard.size()); ++u)
    for (int k = 0; k < 3; ++k) {
      const float* a = f.map(k, u);
      for (std::size_t j = 0; j < kShard[u]; ++j)
        ASSERT_EQ(a[j], value(k, u, j, version[u])) << "mapped unit " << u << " array " << k;
    }
}

// The test's temporary directory, and /dev/shm where there is one: a tmpfs,
// which may not take O_DIRECT (then the file goes through the page cache).
std::vector<std::string> dirs() {
  std::vector<std::string> out = {::testing::TempDir()};
  if (std::filesystem::is_directory("/dev/shm")) out.push_back("/dev/shm");
  return out;
}

TEST(StateFile, EveryUnitHoldsWhatWasLastWrittenThroughAWindowSmallerThanTheModel) {
  for (const std::string& dir : dirs())
    for (int window : {2, 3, 4}) {
      StateFile f(dir, kShard, window, 3);
      SCOPED_TRACE(dir + (f.direct() ? " (O_DIRECT)" : " (through the page cache)"));
      EXPECT_EQ(f.file_bytes(), StateFile::file_bytes(kShard));
      EXPECT_EQ(f.window_bytes(), StateFile::window_bytes(kShard, window));
      EXPECT_LT(f.window_bytes(), f.file_bytes());
      const int n = static_cast<int>(kShard.size());
      std::vector<int> version(n, 0);
      // Setup writes through the mapping (the moments start at zero).
      for (int u = 0; u < n; ++u) {
        for (int k = 0; k < 3; ++k) {
          float* a = f.map(k, u);
          for (std::size_t j = 0; k > 0 && j < kShard[u]; ++j) ASSERT_EQ(a[j], 0.0f);
          for (std::size_t j = 0; j < kShard[u]; ++j) a[j] = value(k, u, j, 0);
        }
      }
      std::vector<int> backward(n), forward(n);
      std::iota(forward.begin(), forward.end(), 0);
      std::iota(backward.rbegin(), backward.rend(), 0);
      std::vector<int> shuffled = forward;
      std::mt19937 rng(7);
      for (int round = 0; round < 3; ++round) {
        step_in_order(f, backward, version, window - 2);
        step_in_order(f, forward, version, window - 2);
        std::shuffle(shuffled.begin(), shuffled.end(), rng);
        step_in_order(f, shuffled, version, -window);
        // A checkpoint between steps: the mapping sees the window's writes,
        // and what it writes (a load) the next steps read.
        expect_mapped(f, version);
        for (int u = 0; u < n; ++u) {
          version[u] += 10;
          for (int k = 0; k < 3; ++k) {
            float* a = f.map(k, u);
            for (std::size_t j = 0; j < kShard[u]; ++j) a[j] = value(k, u, j, version[u]);
          }
        }
      }
      step_in_order(f, backward, version, window - 2);
      f.flush();
      expect_mapped(f, version);
    }
}

TEST(StateFile, AMissingDirectoryIsNamed) {
  try {
    StateFile f("/nonexistent/offload", kShard, 2, 1);
    ADD_FAILURE() << "a file in a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/offload"), std::string::npos) << e.what();
  }
  EXPECT_THROW(StateFile("", kShard, 2, 1), Error);
}

// Run by tests/multiproc/offload_full_disk.sh with RTD_TEST_FULL_DIR on a
// tmpfs too small for the file.
TEST(StateFile, AFullDiskIsNamedWithTheSizes) {
  const char* dir = std::getenv("RTD_TEST_FULL_DIR");
  if (!dir) GTEST_SKIP() << "needs RTD_TEST_FULL_DIR, a small tmpfs (offload_full_disk.sh)";
  try {
    StateFile f(dir, kShard, 2, 1);
    ADD_FAILURE() << "the file fit in " << dir;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    for (const std::string& part : {std::string(dir), std::string("No space left on device"),
                                    std::string("GiB in "), std::string("free: ")})
      EXPECT_NE(what.find(part), std::string::npos) << "no '" << part << "' in: " << what;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a file was left in " << dir;
}

}  // namespace
}  // namespace rtd
