// The copy-engine all-reduce's split of a buffer among ranks: every element
// owned by exactly one rank, chunk starts on 16 bytes, every chunk within a
// scratch slot.
#include "collectives/nccl/ce_chunks.h"

#include <gtest/gtest.h>

namespace rtd::nccl {
namespace {

TEST(ChunkLayout, CoversTheBufferInAlignedChunksThatFitASlot) {
  for (std::size_t elem : {2u, 4u, 8u}) {
    const std::size_t align = 16 / elem;
    for (std::size_t count : {0u, 1u, 3u, 7u, 100u, 4097u, 1u << 20, (1u << 20) + 5}) {
      for (int ranks = 1; ranks <= 8; ++ranks) {
        ChunkLayout c(count, ranks, elem);
        const std::string what = "count " + std::to_string(count) + " ranks " +
                                 std::to_string(ranks) + " elem " + std::to_string(elem);
        EXPECT_EQ(c.begin(0), 0u) << what;
        EXPECT_EQ(c.begin(ranks), count) << what;
        EXPECT_EQ(c.slot_elems() % align, 0u) << what;
        for (int k = 0; k < ranks; ++k) {
          EXPECT_LE(c.begin(k), c.begin(k + 1)) << what << " rank " << k;
          EXPECT_EQ(c.begin(k) % align, 0u) << what << " rank " << k;
          EXPECT_LE(c.size(k), c.slot_elems()) << what << " rank " << k;
        }
      }
    }
  }
}

TEST(ChunkLayout, SplitsEvenlyUpToTheAlignment) {
  ChunkLayout c(1000, 2, 4);  // 500 is a multiple of 4 float32
  EXPECT_EQ(c.begin(1), 500u);
  ChunkLayout odd(1002, 2, 4);  // 501 rounds down to 500
  EXPECT_EQ(odd.begin(1), 500u);
  EXPECT_EQ(odd.size(1), 502u);
}

}  // namespace
}  // namespace rtd::nccl
