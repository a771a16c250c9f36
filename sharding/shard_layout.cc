// UnitLayout arithmetic (shard_layout.h).
#include "sharding/shard_layout.h"

#include <algorithm>

namespace rtd {
namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

UnitLayout layout_unit(const std::vector<std::size_t>& counts, int ranks) {
  UnitLayout out;
  std::size_t at = 0;
  for (std::size_t c : counts) {
    out.offsets.push_back(at);
    out.counts.push_back(c);
    at = round_up(at + c, kShardAlign);
  }
  const std::size_t group = kShardAlign * static_cast<std::size_t>(ranks);
  out.padded = std::max(group, round_up(at, group));
  out.shard = out.padded / static_cast<std::size_t>(ranks);
  return out;
}

std::vector<ShardPiece> pieces_in_shard(const UnitLayout& layout, int rank) {
  const std::size_t lo = layout.shard * static_cast<std::size_t>(rank);
  const std::size_t hi = lo + layout.shard;
  std::vector<ShardPiece> pieces;
  for (std::size_t i = 0; i < layout.counts.size(); ++i) {
    const std::size_t first = std::max(lo, layout.offsets[i]);
    const std::size_t last = std::min(hi, layout.offsets[i] + layout.counts[i]);
    if (first >= last) continue;
    pieces.push_back({static_cast<int>(i), first - layout.offsets[i], last - first, first - lo});
  }
  return pieces;
}

std::vector<std::pair<std::size_t, std::size_t>> padding_of(const UnitLayout& layout) {
  std::vector<std::pair<std::size_t, std::size_t>> gaps;
  std::size_t at = 0;
  for (std::size_t i = 0; i < layout.counts.size(); ++i) {
    if (layout.offsets[i] > at) gaps.emplace_back(at, layout.offsets[i]);
    at = layout.offsets[i] + layout.counts[i];
  }
  if (layout.padded > at) gaps.emplace_back(at, layout.padded);
  return gaps;
}

}  // namespace rtd
