// Publishing and comparing the nodes' settings (settings_exchange.h).
#include "launcher/settings_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "launcher/peers.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd::launcher {
namespace {
std::string seconds_text(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", static_cast<double>(d.count()) / 1000.0);
  return text;
}
}  // namespace

SettingsVerdict check_settings_across_nodes(Store& store, int round, int node_rank, int nnodes,
                                            const Settings& mine, bool host,
                                            std::chrono::milliseconds wait) {
  using std::chrono::milliseconds;
  auto logger = log::get("launcher");
  store.set(round_key(round, "settings/" + std::to_string(node_rank)), encode_settings(mine));
  std::vector<Settings> all;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (int r = 0; r < nnodes; ++r) {
    const auto left = std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                                    deadline - std::chrono::steady_clock::now()));
    try {
      all.push_back(
          decode_settings(store.get(round_key(round, "settings/" + std::to_string(r)), left)));
    } catch (const Error& e) {
      if (e.category() != ErrorCategory::kTimeout) throw;
      throw Error(ErrorCategory::kTimeout,
                  "node " + std::to_string(r) + " joined round " + std::to_string(round) +
                      " but did not say its settings within " + seconds_text(wait) +
                      " s (--heartbeat-timeout): its dtrun went silent, or its host became "
                      "unreachable, after joining");
    }
  }
  SettingsVerdict verdict = compare_settings(all);
  if (node_rank == 0) {
    for (const std::string& w : verdict.warnings)
      logger->warn("the nodes' settings differ (fine if meant; it may slow the job): {}", w);
  }
  store.set(round_key(round, "settings_read/" + std::to_string(node_rank)), "1");
  if (host && !verdict.error.empty()) {
    for (int r = 0; r < nnodes; ++r)
      store.get(round_key(round, "settings_read/" + std::to_string(r)), std::chrono::seconds(10));
  }
  return verdict;
}

}  // namespace rtd::launcher
