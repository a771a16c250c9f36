#include "sharding/shard_layout.h"

#include <gtest/gtest.h>

namespace rtd {
namespace {

TEST(ShardLayout, ParametersStartAlignedAndShardsAreEqual) {
  UnitLayout l = layout_unit({100, 7, 64}, 3);
  EXPECT_EQ(l.offsets, (std::vector<std::size_t>{0, 128, 192}));
  EXPECT_EQ(l.padded % (3 * kShardAlign), 0u);
  EXPECT_GE(l.padded, 256u);
  EXPECT_EQ(l.shard * 3, l.padded);
  EXPECT_EQ(l.shard % kShardAlign, 0u);
}

TEST(ShardLayout, PiecesOfEveryRankCoverEveryParameterOnce) {
  const std::vector<std::size_t> counts = {1000, 7, 3001, 5};
  for (int ranks : {1, 2, 3, 4, 7}) {
    UnitLayout l = layout_unit(counts, ranks);
    std::vector<std::vector<int>> seen(counts.size());
    for (std::size_t i = 0; i < counts.size(); ++i) seen[i].assign(counts[i], 0);
    for (int r = 0; r < ranks; ++r) {
      for (const ShardPiece& p : pieces_in_shard(l, r)) {
        ASSERT_LE(p.shard_offset + p.count, l.shard);
        // The piece sits where the flat layout puts it.
        EXPECT_EQ(l.offsets[p.param] + p.param_first, r * l.shard + p.shard_offset);
        for (std::size_t j = 0; j < p.count; ++j) ++seen[p.param][p.param_first + j];
      }
    }
    for (std::size_t i = 0; i < counts.size(); ++i)
      for (int n : seen[i]) ASSERT_EQ(n, 1) << ranks << " ranks, parameter " << i;
  }
}

TEST(ShardLayout, PaddingIsEverythingOutsideTheParameters) {
  UnitLayout l = layout_unit({10, 70}, 2);
  auto gaps = padding_of(l);
  std::size_t covered = 10 + 70;
  for (auto [first, last] : gaps) covered += last - first;
  EXPECT_EQ(covered, l.padded);
  ASSERT_FALSE(gaps.empty());
  EXPECT_EQ(gaps.front().first, 10u);
  EXPECT_EQ(gaps.back().second, l.padded);
}

TEST(ShardLayout, OneRankKeepsEverything) {
  UnitLayout l = layout_unit({5}, 1);
  EXPECT_EQ(l.shard, l.padded);
  auto pieces = pieces_in_shard(l, 0);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].count, 5u);
}

}  // namespace
}  // namespace rtd
