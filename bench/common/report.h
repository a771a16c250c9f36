// One benchmark row per (op, dtype, size), the nccl-tests bandwidth formulas,
// and the table and JSON that rank 0 prints.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "rt_dist/types.h"

namespace rtd::bench {

struct Row {
  std::string op;
  DType dtype;
  std::size_t bytes;    // nccl-tests' "size": the larger of input and output
  std::size_t count;    // elements of that buffer
  double time_us;       // per operation, median of the timed blocks
  double algbw_gbs;     // bytes / time
  double busbw_gbs;     // algbw x the op's bus factor
  long long wrong;      // elements that differ from the reference; -1 when not checked
  double host_us = -1;  // host time to issue one operation, median; -1 when not measured
};

// nccl-tests' bus factor: all_reduce 2(n-1)/n; reduce_scatter, all_gather and
// all_to_all (n-1)/n; broadcast 1.
double bus_factor(const std::string& op, int ranks);
Row make_row(const std::string& op, DType dtype, std::size_t bytes, double time_us, int ranks,
             long long wrong);

void print_header(const std::string& title);
void print_row(const Row& row);
void write_json(const std::string& path, const std::string& mode, const std::string& label,
                int ranks, const std::vector<Row>& rows);

}  // namespace rtd::bench
