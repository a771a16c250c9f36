// Argument checks shared by every backend: one function per operation, so that
// Gloo and NCCL accept and refuse exactly the same shapes. Each throws
// rtd::Error(kInvalidArgument) naming the operation and the problem; a backend
// passes the memory it takes (host for Gloo, CUDA for NCCL).
#pragma once

#include <string>
#include <vector>

#include "rt_dist/types.h"

namespace rtd::validate {

void rank_in_range(const char* op, const char* which, int rank, int size);
// buf lives where the backend needs it and is not null with a nonzero count.
void buffer_on(const char* op, const BufferView& buf, DeviceType device);

void all_reduce(const BufferView& in, const BufferView& out, ReduceOp reduce, DeviceType device);
void broadcast(const BufferView& buf, int root, int size, DeviceType device);
void all_gather(const BufferView& in, const BufferView& out, int size, DeviceType device);
void reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp reduce, int size,
                    DeviceType device);
void all_to_all(const BufferView& in, const BufferView& out, int size, DeviceType device);
// send or recv: peer in range and not this rank.
void point_to_point(const char* op, const BufferView& buf, int peer, int rank, int size,
                    DeviceType device);

// A persistent all-gather's or reduce-scatter's input: which source holds it
// and where (in bytes) every rank's input lies in that source; for an
// in-place all-gather rank p's lies at `offset + p * in.bytes()`, else at
// `offset` on every rank. Throws when the input lies in no source.
struct SourcePlace {
  int source = -1;
  std::size_t offset = 0;
  bool in_place_gather = false;
};
// PersistentShardCollective::gather_blocks: outs of source's dtype and
// device, each a multiple of size elements, their shares filling one block
// of source (which holds size blocks).
void gather_blocks(const BufferView& source, const std::vector<BufferView>& outs, int size,
                   DeviceType device);
SourcePlace shard_source(const char* op, bool gather, const std::vector<BufferView>& sources,
                         const BufferView& in, const BufferView& out, int rank, int size);

}  // namespace rtd::validate
