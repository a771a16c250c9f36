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

// Copies split over several streams: every byte in exactly one piece, pieces
// in order and starting on 16 bytes (a remainder left out once lost the last
// bytes of a bf16 chunk of 1010 bytes in 3 pieces).
TEST(BytePieces, CoverTheCopyInOrderFromAlignedStarts) {
  for (std::size_t total : {0u, 1u, 2u, 15u, 16u, 17u, 1010u, 4097u * 4, (1u << 20) + 6}) {
    for (int parts = 1; parts <= 9; ++parts) {
      const std::string what = "total " + std::to_string(total) + " parts " + std::to_string(parts);
      std::size_t next = 0;
      for (int j = 0; j < parts; ++j) {
        BytePiece p = piece_of(total, parts, j);
        EXPECT_EQ(p.first, next) << what << " piece " << j;
        EXPECT_LE(p.first, p.last) << what << " piece " << j;
        if (p.first < total) {
          EXPECT_EQ(p.first % 16, 0u) << what << " piece " << j;
        }
        next = p.last;
      }
      EXPECT_EQ(next, total) << what;
    }
  }
}

}  // namespace
}  // namespace rtd::nccl
