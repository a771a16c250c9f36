// Communicator: collectives over a fixed group of ranks. Every collective is
// collective (all ranks call it, in the same order), returns at once with a
// Work, and may be called from one thread at a time per communicator.
// In-place: all_reduce with in == out; all_gather with in at out + rank * in.count;
// reduce_scatter with out at in + rank * out.count.
#pragma once

#include <memory>
#include <string>

#include "rt_dist/types.h"
#include "rt_dist/work.h"

namespace rtd {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // out = reduce(in over ranks); in.count == out.count.
  virtual std::shared_ptr<Work> all_reduce(BufferView in, BufferView out, ReduceOp op) = 0;
  std::shared_ptr<Work> all_reduce(BufferView buf, ReduceOp op) { return all_reduce(buf, buf, op); }
  // buf on every rank = buf on root.
  virtual std::shared_ptr<Work> broadcast(BufferView buf, int root) = 0;
  // out = concat(in of rank 0..size-1); out.count == in.count * size.
  virtual std::shared_ptr<Work> all_gather(BufferView in, BufferView out) = 0;
  // out = slice rank of reduce(in); in.count == out.count * size.
  virtual std::shared_ptr<Work> reduce_scatter(BufferView in, BufferView out, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
  // Point-to-point: not collective; the peer posts the matching call with the same tag.
  virtual std::shared_ptr<Work> send(BufferView buf, int peer, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(BufferView buf, int peer, int tag = 0) = 0;
  // Fails every outstanding and later operation; bounded in time.
  virtual void abort() = 0;
};

}  // namespace rtd
