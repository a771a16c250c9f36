// Filling host buffers with one value and counting elements that differ from
// an expected value, for any dtype (the benchmark's correctness check).
#pragma once

#include <cstddef>
#include <functional>

#include "rt_dist/types.h"

namespace rtd::bench {

void fill_value(void* host, DType dtype, std::size_t count, double value);
// expected(i) is the right value of element i.
long long count_wrong(const void* host, DType dtype, std::size_t count,
                      const std::function<double(std::size_t)>& expected);

}  // namespace rtd::bench
