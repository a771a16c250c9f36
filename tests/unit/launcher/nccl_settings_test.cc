// --nccl-preset's values and what the user's own settings keep; the nodes'
// settings compared: a breaking difference is an error naming each node's
// value, others are warnings, node-specific names are not compared.
#include "launcher/nccl_settings.h"

#include <gtest/gtest.h>

namespace rtd::launcher {
namespace {

bool has(const std::vector<std::pair<std::string, std::string>>& env, const std::string& k,
         const std::string& v) {
  for (const auto& [key, value] : env)
    if (key == k) return value == v;
  return false;
}

TEST(NcclPreset, ParsesTheFabricsAndRefusesOthers) {
  NcclPreset p;
  EXPECT_TRUE(parse_nccl_preset("ib", &p));
  EXPECT_EQ(p, NcclPreset::kIb);
  EXPECT_TRUE(parse_nccl_preset("", &p));
  EXPECT_EQ(p, NcclPreset::kNone);
  EXPECT_FALSE(parse_nccl_preset("IB", &p));
  EXPECT_FALSE(parse_nccl_preset("infiniband", &p));
}

TEST(NcclPreset, IbAndRoceNameTheActivePortsOfTheirLinkLayer) {
  doctor::Facts node;
  node.rdma = {{"mlx5_0", 1, "ACTIVE", "InfiniBand", ""},
               {"mlx5_1", 1, "DOWN", "InfiniBand", ""},
               {"mlx5_2", 1, "ACTIVE", "InfiniBand", ""},
               {"mlx5_3", 1, "ACTIVE", "Ethernet", ""}};
  const auto ib = preset_values(NcclPreset::kIb, node);
  EXPECT_TRUE(has(ib, "NCCL_IB_HCA", "=mlx5_0:1,mlx5_2:1"));
  EXPECT_TRUE(has(ib, "NCCL_IB_DISABLE", "0"));
  const auto roce = preset_values(NcclPreset::kRoce, node);
  EXPECT_TRUE(has(roce, "NCCL_IB_HCA", "=mlx5_3:1"));
  EXPECT_TRUE(has(roce, "NCCL_IB_GID_INDEX", "3"));
  const auto tcp = preset_values(NcclPreset::kTcp, node);
  EXPECT_TRUE(has(tcp, "NCCL_IB_DISABLE", "1"));
  EXPECT_TRUE(has(tcp, "NCCL_SOCKET_NTHREADS", "4"));
  EXPECT_TRUE(preset_values(NcclPreset::kNone, node).empty());
}

TEST(NcclPreset, YourOwnSettingsWinAndAreLogged) {
  std::vector<std::pair<std::string, std::string>> env = {{"NCCL_SOCKET_NTHREADS", "8"}};
  const EnvMap parent = {{"NCCL_IB_DISABLE", "0"}, {"PATH", "/bin"}};
  const auto lines = apply_preset(NcclPreset::kTcp, {}, parent, env);
  EXPECT_TRUE(has(env, "NCCL_SOCKET_NTHREADS", "8"));
  EXPECT_TRUE(has(env, "NCCL_NSOCKS_PERTHREAD", "4"));
  for (const auto& [k, v] : env) EXPECT_NE(k, "NCCL_IB_DISABLE");  // inherited from dtrun's
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("set NCCL_SOCKET_IFNAME"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("NCCL_IB_DISABLE=0 (preset: 1)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("NCCL_SOCKET_NTHREADS=8 (preset: 4)"), std::string::npos) << lines[1];
  EXPECT_TRUE(apply_preset(NcclPreset::kNone, {}, parent, env).empty());
}

TEST(NodeSettings, BreakingDifferencesFailWithEveryNodesValue) {
  const Settings a = effective_settings({{"NCCL_PROTO", "LL"}, {"HOME", "/root"}},
                                        {{"RTD_LOG", "warn"}}, "2.28.3");
  EXPECT_EQ(a.count("HOME"), 0u);
  EXPECT_EQ(a.at("RTD_LOG"), "warn");
  EXPECT_EQ(decode_settings(encode_settings(a)), a);
  Settings b = a, c = a;
  b.erase("NCCL_PROTO");
  c["library nccl"] = "2.21.5";
  const SettingsVerdict v = compare_settings({a, b, c});
  EXPECT_NE(v.error.find("NCCL_PROTO: (unset) on node 1; LL on nodes 0,2"), std::string::npos)
      << v.error;
  EXPECT_NE(v.error.find("library nccl: 2.21.5 on node 2; 2.28.3 on nodes 0,1"), std::string::npos)
      << v.error;
  EXPECT_TRUE(v.warnings.empty());
}

TEST(NodeSettings, OtherDifferencesWarnAndNodeSpecificOnesPass) {
  Settings a = effective_settings({}, {}, "2.28.3"), b = a;
  a["NCCL_DEBUG"] = "INFO";
  a["NCCL_SOCKET_IFNAME"] = "eth0";
  b["NCCL_SOCKET_IFNAME"] = "ens5";
  const SettingsVerdict v = compare_settings({a, b});
  EXPECT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_EQ(v.warnings[0], "NCCL_DEBUG: (unset) on node 1; INFO on node 0");
  EXPECT_TRUE(compare_settings({a, a, a}).warnings.empty());
}

}  // namespace
}  // namespace rtd::launcher
