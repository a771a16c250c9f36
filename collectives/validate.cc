// Argument checks shared by every backend.
#include "collectives/validate.h"

#include "rt_dist/communicator.h"
#include "rt_dist/error.h"

namespace rtd::validate {
namespace {

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw Error(ErrorCategory::kInvalidArgument, std::string(op) + ": " + message);
}

// The checks below are inlined into each operation's check (the data path
// runs them on every call), their failures formatted out of the way.
[[noreturn]] void dtypes_differ(const char* op, const BufferView& in, const BufferView& out) {
  fail(op, "input is " + std::string(to_string(in.dtype)) + " but output is " +
               std::string(to_string(out.dtype)));
}

[[noreturn]] void count_differs(const char* op, const char* which, std::size_t actual,
                                std::size_t expected) {
  fail(op, std::string(which) + " has " + std::to_string(actual) + " elements, expected " +
               std::to_string(expected));
}

[[noreturn]] void wrong_device(const char* op, DeviceType device) {
  fail(op, device == DeviceType::kCpu
               ? "this backend takes host (CPU) buffers only"
               : "the NCCL backend takes CUDA device buffers (BufferView.device = kCuda); use "
                 "the Gloo backend for host memory");
}

inline void same_dtype(const char* op, const BufferView& in, const BufferView& out) {
  if (in.dtype != out.dtype) [[unlikely]]
    dtypes_differ(op, in, out);
}

inline void count_equals(const char* op, const char* which, std::size_t actual,
                         std::size_t expected) {
  if (actual != expected) [[unlikely]]
    count_differs(op, which, actual, expected);
}

inline void reducible(const char* op, DType dtype, ReduceOp reduce) {
  const bool integer = dtype == DType::kInt32 || dtype == DType::kInt64;
  if (integer && reduce == ReduceOp::kAvg) [[unlikely]]
    fail(op, "avg is defined for floating-point dtypes only; use sum and divide");
}

inline void placed(const char* op, const BufferView& buf, DeviceType device) {
  if (buf.device != device) [[unlikely]]
    wrong_device(op, device);
  if (buf.data == nullptr && buf.count > 0) [[unlikely]]
    fail(op, "buffer is null but count is nonzero");
}

inline void pair_on(const char* op, const BufferView& in, const BufferView& out,
                    DeviceType device) {
  placed(op, in, device);
  placed(op, out, device);
  same_dtype(op, in, out);
}

}  // namespace

void rank_in_range(const char* op, const char* which, int rank, int size) {
  if (rank < 0 || rank >= size) {
    fail(op, std::string(which) + " " + std::to_string(rank) + " is outside [0, " +
                 std::to_string(size) + ")");
  }
}

void buffer_on(const char* op, const BufferView& buf, DeviceType device) {
  placed(op, buf, device);
}

void all_reduce(const BufferView& in, const BufferView& out, ReduceOp reduce, DeviceType device) {
  pair_on("all_reduce", in, out, device);
  count_equals("all_reduce", "output", out.count, in.count);
  reducible("all_reduce", in.dtype, reduce);
}

void broadcast(const BufferView& buf, int root, int size, DeviceType device) {
  placed("broadcast", buf, device);
  rank_in_range("broadcast", "root", root, size);
}

void all_gather(const BufferView& in, const BufferView& out, int size, DeviceType device) {
  pair_on("all_gather", in, out, device);
  count_equals("all_gather", "output", out.count, in.count * size);
}

void reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp reduce, int size,
                    DeviceType device) {
  pair_on("reduce_scatter", in, out, device);
  count_equals("reduce_scatter", "input", in.count, out.count * size);
  reducible("reduce_scatter", in.dtype, reduce);
}

void all_to_all(const BufferView& in, const BufferView& out, int size, DeviceType device) {
  pair_on("all_to_all", in, out, device);
  count_equals("all_to_all", "output", out.count, in.count);
  if (in.count % static_cast<std::size_t>(size) != 0) {
    fail("all_to_all", "count " + std::to_string(in.count) +
                           " is not divisible by the communicator size " + std::to_string(size));
  }
  if (in.data == out.data && in.count > 0)
    fail("all_to_all", "in and out must not be the same buffer");
}

void point_to_point(const char* op, const BufferView& buf, int peer, int rank, int size,
                    DeviceType device) {
  buffer_on(op, buf, device);
  if (peer == Communicator::kAnySource) {
    fail(op, "a receive from any source is for host memory (Gloo) only; name the peer");
  }
  rank_in_range(op, "peer", peer, size);
  if (peer == rank) fail(op, "peer is this rank");
}

void gather_blocks(const BufferView& source, const std::vector<BufferView>& outs, int size,
                   DeviceType device) {
  const char* op = "gather_blocks";
  if (outs.empty()) fail(op, "no outputs");
  std::size_t block = 0;
  for (const BufferView& out : outs) {
    buffer_on(op, out, device);
    if (out.dtype != source.dtype) {
      fail(op, "an output is " + std::string(to_string(out.dtype)) + ", the gather buffer " +
                   std::string(to_string(source.dtype)));
    }
    if (out.count % static_cast<std::size_t>(size) != 0) {
      fail(op, "an output's count " + std::to_string(out.count) +
                   " is not divisible by the communicator size " + std::to_string(size));
    }
    block += out.count / static_cast<std::size_t>(size);
  }
  if (block * static_cast<std::size_t>(size) != source.count) {
    fail(op, "the outputs' shares make blocks of " + std::to_string(block) +
                 " elements; the gather buffer holds " + std::to_string(size) + " blocks of " +
                 std::to_string(source.count / static_cast<std::size_t>(size)));
  }
}

SourcePlace shard_source(const char* op, bool gather, const std::vector<BufferView>& sources,
                         const BufferView& in, const BufferView& out, int rank, int size) {
  SourcePlace place;
  const char* base = static_cast<const char*>(in.data);
  std::size_t span = in.bytes();
  if (gather && size > 0 && static_cast<const char*>(out.data) + rank * in.bytes() == base) {
    place.in_place_gather = true;  // every rank's block of out
    base = static_cast<const char*>(out.data);
    span = out.bytes();
  }
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const char* first = static_cast<const char*>(sources[i].data);
    if (base >= first && base + span <= first + sources[i].bytes()) {
      place.source = static_cast<int>(i);
      place.offset = static_cast<std::size_t>(base - first);
      return place;
    }
  }
  fail(op, "its input (" + std::to_string(in.count) + " " + std::string(to_string(in.dtype)) +
               ") lies in none of the sources given when it was set up; gather from and "
               "reduce-scatter out of those buffers only");
}

}  // namespace rtd::validate
