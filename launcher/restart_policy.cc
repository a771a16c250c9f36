// Restart backoff and the summary of a spent budget (restart_policy.h).
#include "launcher/restart_policy.h"

#include <algorithm>
#include <random>

namespace rtd::launcher {

std::chrono::milliseconds restart_backoff(int restart, std::chrono::seconds first,
                                          std::chrono::seconds most, double jitter) {
  if (restart < 1 || first.count() == 0) return std::chrono::milliseconds(0);
  double ms = static_cast<double>(std::chrono::milliseconds(first).count());
  const double cap = static_cast<double>(std::chrono::milliseconds(most).count());
  for (int k = 1; k < restart && ms < cap; ++k) ms *= 2;
  ms = std::min(ms, cap) * std::clamp(jitter, 0.75, 1.25);
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

double draw_jitter() {
  static thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.75, 1.25)(engine);
}

std::string budget_spent(const std::vector<std::string>& failures, int max_restarts) {
  std::string out = "the restart budget is spent (" + std::to_string(max_restarts) + " of " +
                    std::to_string(max_restarts) + " restarts); the failures, first to last:";
  for (std::size_t i = 0; i < failures.size(); ++i)
    out += (i ? "; " : " ") + std::to_string(i + 1) + ") " + failures[i];
  return out;
}

}  // namespace rtd::launcher
