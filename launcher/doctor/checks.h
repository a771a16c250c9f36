// `dtrun doctor`'s judgements: each check turns Facts into a Finding (what
// was found, how bad, one line of advice). Pure functions, so that tests
// give them made-up facts of machines we do not have.
#pragma once

#include <string>
#include <vector>

#include "launcher/doctor/facts.h"

namespace rtd::launcher::doctor {

enum class Status { kOk, kInfo, kWarn, kError };
const char* status_name(Status s);  // "ok", "info", "warn", "ERROR"

struct Finding {
  std::string check;
  Status status = Status::kOk;
  std::string found;
  std::string advice;  // empty when there is nothing to do
};

// What the job would be: dtrun's own flags.
struct JobShape {
  int nproc_per_node = 1;
  int nnodes = 1;
};

// The interfaces NCCL's socket transport would use on this node, as NCCL
// chooses them (NCCL_SOCKET_IFNAME: a comma-separated list of prefixes,
// "=" for exact names, "^" to exclude; unset: interfaces named ib* first,
// else any but docker* and lo, else lo), among those up with an address.
// `why` says which rule chose them.
std::vector<std::string> nccl_socket_interfaces(const Facts& facts, std::string* why);

std::vector<Finding> evaluate(const Facts& facts, const JobShape& job);

// The all-reduce bus bandwidth (GB/s, 256 MiB) the links between a node's
// GPUs should give at least: 10 per NVLink link (NVLink 4 carries 25 each
// way; through NVSwitch, the GPU's links), 10 with peer access over PCIe, 3
// through host memory; 0 without GPUs.
double expected_busbw_within(const std::vector<GpuLink>& links, std::size_t gpus);

}  // namespace rtd::launcher::doctor
