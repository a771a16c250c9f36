// make_communicator: the one place that knows which backends were built.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "collectives/flight_recorder.h"
#include "rt_dist/communicator.h"
#include "rt_dist/context.h"
#include "rt_dist/store.h"

namespace rtd {

struct CommunicatorOptions {
  std::string backend = "gloo";  // "gloo" or "nccl"
  std::shared_ptr<Store> store;  // scoped to this communicator by the caller
  std::string name = "default";  // in messages
  int rank = 0;
  int size = 1;
  std::string host = "127.0.0.1";  // Gloo: the address this rank listens on
  int device = 0;                  // NCCL: the GPU
  std::chrono::milliseconds timeout{300'000};
  FlightOptions flight;            // the flight recorder's live warning and dump
  bool check_collectives = false;  // compare every collective across ranks first (debugging)
  NcclSettings nccl;
};

// Collective over options.size ranks; throws rtd::Error(kConfig) for a backend not built.
std::unique_ptr<Communicator> make_communicator(const CommunicatorOptions& options);

// How many GPUs this process sees through a backend that was built (0 without
// one); why says why there are none.
int usable_gpu_count(std::string* why);

}  // namespace rtd
