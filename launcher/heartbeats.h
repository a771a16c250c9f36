// Heartbeats between agents through the store: every node other than 0 bumps
// its counter each time it checks on its peers; node 0 notices a node whose
// counter stopped moving (its agent was killed, its host went away) instead of
// waiting for it forever.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "rt_dist/store.h"

namespace rtd::launcher {

class Heartbeats {
 public:
  Heartbeats(int nnodes, std::chrono::milliseconds timeout);
  // A node other than 0: says it is alive.
  void beat(Store& store, int node_rank);
  // A node whose workers all finished: it stops beating, and that is fine.
  void finished(Store& store, int node_rank);
  // Node 0: the first unfinished node silent for longer than the timeout, as a message.
  std::optional<std::string> find_silent(Store& store);

 private:
  struct Seen {
    long long value = -1;
    std::chrono::steady_clock::time_point since;
  };
  std::chrono::milliseconds timeout_;
  std::vector<Seen> seen_;
};

}  // namespace rtd::launcher
