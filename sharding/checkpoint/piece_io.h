// One rank's pieces of a checkpoint, written and read by several threads at
// once: each thread moves whole pieces (a pwrite or pread at the piece's
// offset) and computes or checks their CRC-32C itself, so that the disk sees
// several requests in flight and the checksums run beside the I/O. GPU
// ranges pass through pinned staging buffers, one per thread.
#pragma once

#include <cstddef>
#include <string>

#include "checkpoint.pb.h"
#include "rt_dist/checkpoint.h"

namespace rtd::ckpt {

// The element count of t's global shape; throws naming t when a range lies
// outside it or has no data.
std::size_t checked_count(const Tensor& t);

// Host memory owned by the checkpoint code: pinned (for the GPU's copies) or
// plain, kept across calls so that only the first pays for it.
class HostBuffer {
 public:
  HostBuffer() = default;
  ~HostBuffer() { release(); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void reserve(std::size_t bytes, bool pinned);
  void release();
  char* data() const { return data_; }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  bool pinned_ = false;
};

// Writes state's ranges in pieces of at most piece_bytes, at most `threads`
// at once, into as many files (`path`, then `path` with .1, .2, ... before
// its extension; fewer for fewer pieces), the pieces dealt to them in turn:
// threads that write one file wait for each other in the kernel (a file's
// buffered writes hold its inode's lock), threads with files of their own do
// not. fsyncs them and returns what it wrote; a failure removes them.
proto::CheckpointRankPart write_pieces(const std::string& path, const State& state,
                                       std::size_t piece_bytes, int threads);

// Fills every range of `state` from the checkpoint in `dir`, described by
// `manifest`: each element from one stored piece, each piece read and checked
// once, at most `threads` pieces at once. Throws naming the tensor and the
// elements that are not stored, or the file and piece that fail their check.
// check_first: every piece is checked before any range is written (a failure
// writes nothing); else each is checked as it is written.
void read_pieces(const std::string& dir, const proto::CheckpointManifest& manifest, State& state,
                 int threads, bool check_first);

}  // namespace rtd::ckpt
