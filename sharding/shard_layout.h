// UnitLayout: where a unit's parameters sit in its flat buffer, and which
// range of that buffer each rank of the shard group keeps. Pure arithmetic,
// the same on every rank. Each parameter starts on a multiple of kShardAlign
// elements and the flat size is padded to ranks * kShardAlign, so that every
// shard has the same size and starts on 256 bytes (fp32): the trainer never
// sees the padding.
#pragma once

#include <cstddef>
#include <vector>

namespace rtd {

constexpr std::size_t kShardAlign = 64;  // elements

struct UnitLayout {
  std::vector<std::size_t> offsets;  // per parameter, elements from the flat start
  std::vector<std::size_t> counts;   // per parameter
  std::size_t padded = 0;            // flat elements, a multiple of ranks * kShardAlign
  std::size_t shard = 0;             // elements each rank keeps: padded / ranks
};

UnitLayout layout_unit(const std::vector<std::size_t>& counts, int ranks);

// The part of parameter `param` that falls in rank `rank`'s shard: elements
// [param_first, param_first + count) of the parameter sit at shard_offset in
// the shard. count == 0 where the shard holds none of it.
struct ShardPiece {
  int param = 0;
  std::size_t param_first = 0;
  std::size_t count = 0;
  std::size_t shard_offset = 0;
};
std::vector<ShardPiece> pieces_in_shard(const UnitLayout& layout, int rank);

// The gaps of the flat buffer that belong to no parameter: [first, last) pairs.
std::vector<std::pair<std::size_t, std::size_t>> padding_of(const UnitLayout& layout);

}  // namespace rtd
