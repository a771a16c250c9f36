// A rank-sharded data loader (docs/data.md). Records of a fixed size live in
// binary shard files (a 64-byte header, then the records back to back),
// memory-mapped. A distributed sampler cuts every epoch's seeded shuffle of
// all records into global batches of batch_per_rank x world records, rank r
// taking rows [r * batch_per_rank, (r + 1) * batch_per_rank) of each: the
// same global batches whatever the world size. A prefetch thread fills the
// next batches while the trainer uses the current one; for a GPU trainer it
// fills pinned host memory and next_on_device() copies each batch to the GPU
// on a stream of the loader's, overlapping the trainer's work. position() is a
// string for a checkpoint's meta; a loader given it continues exactly there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rt_dist/work.h"

namespace rtd::data {

// Writes a shard file of `records` records of record_bytes each; fill(i, out)
// writes record i's bytes. Throws rtd::Error naming the file.
void write_shard(const std::string& path, std::size_t record_bytes, std::uint64_t records,
                 const std::function<void(std::uint64_t, unsigned char*)>& fill);

struct LoaderOptions {
  std::vector<std::string> files;  // shard files, in this order
  std::size_t record_bytes = 0;    // every file's must match
  int batch_per_rank = 1;
  int rank = 0;
  int world_size = 1;
  std::uint64_t seed = 0;
  bool shuffle = true;
  int prefetch = 2;  // batches prepared ahead
  // A GPU (its index) to hand batches out on with next_on_device(); -1: host only.
  int device_index = -1;
};

class Loader {
 public:
  // Maps and checks every file: a missing, short, long or foreign file, or a
  // record size that differs, is an rtd::Error naming it.
  explicit Loader(LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // This rank's next batch: batch_per_rank records back to back, valid until
  // the next call. Epochs follow one another; the records that do not fill a
  // whole global batch at an epoch's end are left out of that epoch.
  const unsigned char* next();
  // This rank's next batch in memory of the GPU device_index: its copy from
  // pinned memory starts once `stream` is done with the batch before last, and
  // the work queued on `stream` after this call waits for it (the host does
  // not). Valid for the work queued on `stream` until the next call after this
  // one. Do not mix with next() on one loader.
  const void* next_on_device(StreamRef stream);
  std::uint64_t records() const;          // in all files
  std::uint64_t steps_per_epoch() const;  // global batches per epoch
  // Where the next batch comes from ("epoch:step"), and going there.
  std::string position() const;
  void set_position(const std::string& position);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rtd::data
