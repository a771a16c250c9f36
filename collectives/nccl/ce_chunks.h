// How the copy-engine all-reduce splits a buffer among ranks: rank k owns
// [begin(k), begin(k + 1)). Chunk starts are multiples of 16 bytes (so the
// addition can load 16 bytes at a time), and every chunk fits a scratch slot
// of slot_elems elements, itself a multiple of 16 bytes. Pure arithmetic,
// the same on every rank.
#pragma once

#include <cstddef>

namespace rtd::nccl {

class ChunkLayout {
 public:
  ChunkLayout(std::size_t count, int ranks, std::size_t elem_bytes)
      : count_(count), ranks_(ranks), align_(elem_bytes >= 16 ? 1 : 16 / elem_bytes) {}

  std::size_t begin(int k) const {
    if (static_cast<std::size_t>(k) >= ranks_) return count_;
    return count_ * static_cast<std::size_t>(k) / ranks_ / align_ * align_;
  }
  std::size_t size(int k) const { return begin(k + 1) - begin(k); }
  // Elements per scratch slot: the largest chunk, rounded up to the alignment.
  std::size_t slot_elems() const {
    std::size_t most = (count_ + ranks_ - 1) / ranks_ + align_;
    return (most + align_ - 1) / align_ * align_;
  }

 private:
  std::size_t count_;
  std::size_t ranks_;
  std::size_t align_;  // elements per 16 bytes
};

// Piece j of `parts` of a copy of `total` bytes: [first, last). Pieces start
// on 16 bytes, follow each other, and the last ends at total (some may be empty).
struct BytePiece {
  std::size_t first = 0, last = 0;
};
inline BytePiece piece_of(std::size_t total, int parts, int j) {
  const std::size_t per = ((total + parts - 1) / parts + 15) / 16 * 16;
  const std::size_t first = j * per < total ? j * per : total;
  const std::size_t last = j + 1 == parts || first + per > total ? total : first + per;
  return {first, last};
}

}  // namespace rtd::nccl
