// Heartbeat counters under "dtrun/heartbeat/<node>", watched by node 0.
#include "launcher/heartbeats.h"

namespace rtd::launcher {
namespace {
std::string key(int node) { return "dtrun/heartbeat/" + std::to_string(node); }
std::string finished_key(int node) { return "dtrun/finished/" + std::to_string(node); }
}  // namespace

Heartbeats::Heartbeats(int nnodes, std::chrono::milliseconds timeout)
    : timeout_(timeout), seen_(nnodes, Seen{-1, std::chrono::steady_clock::now()}) {}

void Heartbeats::beat(Store& store, int node_rank) { store.add(key(node_rank), 1); }

void Heartbeats::finished(Store& store, int node_rank) { store.set(finished_key(node_rank), "1"); }

std::optional<std::string> Heartbeats::find_silent(Store& store) {
  auto now = std::chrono::steady_clock::now();
  for (int node = 1; node < static_cast<int>(seen_.size()); ++node) {
    long long value = store.add(key(node), 0);
    Seen& s = seen_[node];
    if (value != s.value) {
      s = Seen{value, now};
    } else if (now - s.since > timeout_ && !store.check({finished_key(node)})) {
      return "node " + std::to_string(node) + " has not been heard from for " +
             std::to_string(
                 std::chrono::duration_cast<std::chrono::seconds>(now - s.since).count()) +
             " s (its dtrun was killed, or its host is unreachable)";
    }
  }
  return std::nullopt;
}

}  // namespace rtd::launcher
