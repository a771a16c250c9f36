// Publishing and comparing the nodes' settings (settings_exchange.h).
#include "launcher/settings_exchange.h"

#include <chrono>
#include <vector>

#include "launcher/peers.h"
#include "runtime/core/log.h"

namespace rtd::launcher {

SettingsVerdict check_settings_across_nodes(Store& store, int round, int node_rank, int nnodes,
                                            const Settings& mine, bool host) {
  auto logger = log::get("launcher");
  store.set(round_key(round, "settings/" + std::to_string(node_rank)), encode_settings(mine));
  std::vector<Settings> all;
  for (int r = 0; r < nnodes; ++r) {
    all.push_back(decode_settings(
        store.get(round_key(round, "settings/" + std::to_string(r)), std::chrono::minutes(1))));
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
