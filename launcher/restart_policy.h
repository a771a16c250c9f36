// What the agent does between failures: how long it waits before restart K,
// and what it says when the restarts are spent (every failure, in order).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace rtd::launcher {

// The wait before restart `restart` (1 for the first): first * 2^(restart-1),
// at most `most`, scaled by `jitter` in [0.75, 1.25] (each node draws its own).
std::chrono::milliseconds restart_backoff(int restart, std::chrono::seconds first,
                                          std::chrono::seconds most, double jitter);
// A jitter drawn from [0.75, 1.25].
double draw_jitter();
// "the restart budget is spent (K of K); the failures, first to last: 1) ...; 2) ..."
std::string budget_spent(const std::vector<std::string>& failures, int max_restarts);

}  // namespace rtd::launcher
