// NCCL presets and the nodes' settings compared (nccl_settings.h).
#include "launcher/nccl_settings.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace rtd::launcher {
namespace {

// The RDMA ports of one link layer, as NCCL_IB_HCA's exact list ("=mlx5_0:1,mlx5_1:1").
std::string hca_list(const doctor::Facts& node, const std::string& link_layer) {
  std::string list;
  for (const auto& p : node.rdma) {
    if (p.state == "ACTIVE" && p.link_layer == link_layer)
      list += (list.empty() ? "=" : ",") + p.device + ":" + std::to_string(p.port);
  }
  return list;
}

bool is_setting(const std::string& key) {
  return key.rfind("NCCL_", 0) == 0 || key.rfind("RTD_", 0) == 0;
}

}  // namespace

bool parse_nccl_preset(const std::string& text, NcclPreset* out) {
  static const std::map<std::string, NcclPreset> names = {
      {"", NcclPreset::kNone}, {"none", NcclPreset::kNone}, {"nvlink", NcclPreset::kNvlink},
      {"ib", NcclPreset::kIb}, {"roce", NcclPreset::kRoce}, {"tcp", NcclPreset::kTcp}};
  auto it = names.find(text);
  if (it == names.end()) return false;
  *out = it->second;
  return true;
}

const char* preset_name(NcclPreset p) {
  switch (p) {
    case NcclPreset::kNone:
      return "none";
    case NcclPreset::kNvlink:
      return "nvlink";
    case NcclPreset::kIb:
      return "ib";
    case NcclPreset::kRoce:
      return "roce";
    case NcclPreset::kTcp:
      return "tcp";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> preset_values(NcclPreset preset,
                                                               const doctor::Facts& node) {
  // Bootstrap and socket traffic on a real interface, never lo or a bridge.
  const std::pair<std::string, std::string> socket_if{"NCCL_SOCKET_IFNAME", "^lo,docker,virbr"};
  switch (preset) {
    case NcclPreset::kNone:
      return {};
    case NcclPreset::kNvlink:
      // One node: peer-to-peer over NVLink (not PCIe), no network transport.
      return {{"NCCL_P2P_LEVEL", "NVL"}, {"NCCL_IB_DISABLE", "1"}};
    case NcclPreset::kIb: {
      std::vector<std::pair<std::string, std::string>> v = {
          {"NCCL_IB_DISABLE", "0"}, {"NCCL_NET_GDR_LEVEL", "PHB"}, socket_if};
      if (std::string hca = hca_list(node, "InfiniBand"); !hca.empty())
        v.push_back({"NCCL_IB_HCA", hca});
      return v;
    }
    case NcclPreset::kRoce: {
      // RoCE v2 over IPv4 is GID index 3 on the usual setups; traffic class 106
      // is the lossless class most RoCE fabrics configure.
      std::vector<std::pair<std::string, std::string>> v = {{"NCCL_IB_DISABLE", "0"},
                                                            {"NCCL_IB_GID_INDEX", "3"},
                                                            {"NCCL_IB_TC", "106"},
                                                            {"NCCL_NET_GDR_LEVEL", "PHB"},
                                                            socket_if};
      if (std::string hca = hca_list(node, "Ethernet"); !hca.empty())
        v.push_back({"NCCL_IB_HCA", hca});
      return v;
    }
    case NcclPreset::kTcp:
      // Sockets only: several threads and sockets per connection (their
      // product at most 64) to fill a fast Ethernet link.
      return {{"NCCL_IB_DISABLE", "1"},
              socket_if,
              {"NCCL_SOCKET_NTHREADS", "4"},
              {"NCCL_NSOCKS_PERTHREAD", "4"}};
  }
  return {};
}

std::vector<std::string> apply_preset(NcclPreset preset, const doctor::Facts& node,
                                      const EnvMap& parent,
                                      std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> lines;
  std::string set, kept;
  for (const auto& entry : preset_values(preset, node)) {
    // Named, not bound: clang before 16 cannot capture a structured binding.
    const std::string& k = entry.first;
    const std::string& v = entry.second;
    auto given = std::find_if(overrides.begin(), overrides.end(),
                              [&](const auto& kv) { return kv.first == k; });
    const auto inherited = parent.find(k);
    if (given != overrides.end() || inherited != parent.end()) {
      const std::string& yours = given != overrides.end() ? given->second : inherited->second;
      kept += (kept.empty() ? "" : ", ") + k + "=" + yours + " (preset: " + v + ")";
      continue;
    }
    overrides.emplace_back(k, v);
    set += (set.empty() ? "" : ", ") + k + "=" + v;
  }
  if (preset == NcclPreset::kNone) return lines;
  lines.push_back(std::string("NCCL preset ") + preset_name(preset) + ": " +
                  (set.empty() ? "nothing to set" : "set " + set));
  if (!kept.empty()) lines.push_back("NCCL preset: kept your own " + kept);
  return lines;
}

Settings effective_settings(const EnvMap& parent,
                            const std::vector<std::pair<std::string, std::string>>& overrides,
                            const std::string& nccl_version) {
  Settings s;
  for (const auto& [k, v] : parent)
    if (is_setting(k)) s[k] = v;
  for (const auto& [k, v] : overrides)
    if (is_setting(k)) s[k] = v;
  s["library nccl"] = nccl_version.empty() ? "(not found)" : nccl_version;
  s["library rt_dist"] = RTD_VERSION;
  return s;
}

std::string encode_settings(const Settings& s) {
  std::string out;
  for (const auto& [k, v] : s) {
    std::string value = v;
    std::replace(value.begin(), value.end(), '\n', ' ');
    out += k + "=" + value + "\n";
  }
  return out;
}

Settings decode_settings(const std::string& text) {
  Settings s;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) s[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return s;
}

SettingsVerdict compare_settings(const std::vector<Settings>& nodes) {
  static const std::set<std::string> breaking = {"library nccl", "library rt_dist", "NCCL_PROTO",
                                                 "NCCL_ALGO",    "NCCL_IB_DISABLE", "NCCL_NET"};
  static const std::set<std::string> node_specific = {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA",
                                                      "NCCL_DEBUG_FILE",    "NCCL_TOPO_FILE",
                                                      "NCCL_HOSTID",        "RTD_TRACE_DIR"};
  std::set<std::string> keys;
  for (const Settings& n : nodes)
    for (const auto& [k, v] : n) keys.insert(k);
  SettingsVerdict verdict;
  for (const std::string& k : keys) {
    if (node_specific.count(k)) continue;
    std::map<std::string, std::vector<int>> by_value;
    for (std::size_t r = 0; r < nodes.size(); ++r) {
      auto it = nodes[r].find(k);
      by_value[it == nodes[r].end() ? "(unset)" : it->second].push_back(static_cast<int>(r));
    }
    if (by_value.size() < 2) continue;
    std::string line = k + ":";
    for (const auto& [value, ranks] : by_value) {
      line += " " + value + " on node" + (ranks.size() > 1 ? "s" : "");
      for (std::size_t i = 0; i < ranks.size(); ++i)
        line += (i ? "," : " ") + std::to_string(ranks[i]);
      line += ";";
    }
    line.pop_back();
    if (breaking.count(k))
      verdict.error += (verdict.error.empty() ? "" : "\n  ") + line;
    else
      verdict.warnings.push_back(line);
  }
  if (!verdict.error.empty()) {
    verdict.error =
        "the nodes' NCCL settings differ where NCCL needs them equal (a job run "
        "so hangs or fails inside NCCL):\n  " +
        verdict.error + "\nset them alike on every node (or unset them everywhere)";
  }
  return verdict;
}

}  // namespace rtd::launcher
