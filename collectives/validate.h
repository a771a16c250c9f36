// Argument checks shared by every backend: sizes that match, devices that fit,
// ranks in range. Each throws rtd::Error(kInvalidArgument) naming the problem.
#pragma once

#include <string>

#include "rt_dist/types.h"

namespace rtd::validate {

void same_dtype(const char* op, const BufferView& in, const BufferView& out);
void count_equals(const char* op, const char* which, std::size_t actual, std::size_t expected);
void rank_in_range(const char* op, const char* which, int rank, int size);
void host_buffer(const char* op, const BufferView& buf);
void divisible(const char* op, std::size_t count, int size);
void reducible(const char* op, DType dtype, ReduceOp reduce);

}  // namespace rtd::validate
