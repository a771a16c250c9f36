// Argument checks shared by every backend.
#include "collectives/validate.h"

#include "rt_dist/error.h"

namespace rtd::validate {

namespace {
[[noreturn]] void fail(const char* op, const std::string& message) {
  throw Error(ErrorCategory::kInvalidArgument, std::string(op) + ": " + message);
}
}  // namespace

void same_dtype(const char* op, const BufferView& in, const BufferView& out) {
  if (in.dtype != out.dtype) {
    fail(op, "input is " + std::string(to_string(in.dtype)) + " but output is " +
                 std::string(to_string(out.dtype)));
  }
}

void count_equals(const char* op, const char* which, std::size_t actual, std::size_t expected) {
  if (actual != expected) {
    fail(op, std::string(which) + " has " + std::to_string(actual) + " elements, expected " +
                 std::to_string(expected));
  }
}

void rank_in_range(const char* op, const char* which, int rank, int size) {
  if (rank < 0 || rank >= size) {
    fail(op, std::string(which) + " " + std::to_string(rank) + " is outside [0, " +
                 std::to_string(size) + ")");
  }
}

void host_buffer(const char* op, const BufferView& buf) {
  if (buf.device != DeviceType::kCpu) fail(op, "this backend takes host (CPU) buffers only");
  if (buf.data == nullptr && buf.count > 0) fail(op, "buffer is null but count is nonzero");
}

void divisible(const char* op, std::size_t count, int size) {
  if (count % static_cast<std::size_t>(size) != 0) {
    fail(op, "count " + std::to_string(count) + " is not divisible by the communicator size " +
                 std::to_string(size));
  }
}

void reducible(const char* op, DType dtype, ReduceOp reduce) {
  bool integer = dtype == DType::kInt32 || dtype == DType::kInt64;
  if (integer && reduce == ReduceOp::kAvg) {
    fail(op, "avg is defined for floating-point dtypes only; use sum and divide");
  }
}

}  // namespace rtd::validate
