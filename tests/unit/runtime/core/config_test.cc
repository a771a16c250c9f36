#include "runtime/core/config.h"

#include <gtest/gtest.h>

#include <set>

#include "rt_dist/error.h"

namespace rtd {
namespace {

TEST(Config, EmptyEnvironmentGivesDefaults) {
  Config c = Config::from_env({});
  EXPECT_FALSE(c.rank.has_value());
  EXPECT_EQ(c.timeout, std::chrono::seconds(300));
  EXPECT_EQ(c.log_spec, "info");
  EXPECT_EQ(c.backend, "auto");
  EXPECT_EQ(c.round, 0);
}

TEST(Config, ParsesEveryTypedField) {
  Config c = Config::from_env({{"RANK", "3"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"},
                               {"GROUP_RANK", "0"},
                               {"DTRUN_STORE", "10.0.0.1:29500"},
                               {"DTRUN_TOKEN", "abc"},
                               {"DTRUN_ROUND", "2"},
                               {"RTD_TIMEOUT_S", "7"},
                               {"RTD_LOG", "store:debug"}});
  EXPECT_EQ(*c.rank, 3);
  EXPECT_EQ(*c.world_size, 8);
  EXPECT_EQ(*c.local_rank, 1);
  EXPECT_EQ(c.store_addr, "10.0.0.1:29500");
  EXPECT_EQ(c.token, "abc");
  EXPECT_EQ(c.round, 2);
  EXPECT_EQ(c.timeout, std::chrono::seconds(7));
  EXPECT_EQ(c.log_spec, "store:debug");
}

TEST(Config, NonNumberNamesTheVariable) {
  try {
    Config::from_env({{"RANK", "two"}});
    FAIL() << "expected rtd::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_NE(std::string(e.what()).find("RANK='two'"), std::string::npos) << e.what();
  }
}

// A knob removed after it measured no gain is refused, naming it, not ignored.
TEST(Config, ARemovedKnobIsNamedNotIgnored) {
  for (const char* value : {"0", "1"}) {
    try {
      Config::from_env({{"RTD_NCCL_SPLIT_SHARE", value}});
      FAIL() << "RTD_NCCL_SPLIT_SHARE=" << value << " was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kConfig);
      EXPECT_NE(std::string(e.what()).find("RTD_NCCL_SPLIT_SHARE is no longer read"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Config, SwitchesAreZeroOrOneAndNamedOtherwise) {
  for (const char* name :
       {"DTRUN_RECOVERY_JOIN", "RTD_CHECK_COLLECTIVES", "RTD_CE_STAGED", "RTD_NCCL_DIRECT_INIT"}) {
    try {
      Config::from_env({{name, "2"}});
      FAIL() << name << "=2 was taken";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kConfig);
      EXPECT_NE(std::string(e.what()).find(std::string(name) + "=2 must be 0 or 1"),
                std::string::npos)
          << e.what();
    }
  }
  Config on = Config::from_env({{"DTRUN_RECOVERY_JOIN", "1"},
                                {"RTD_CHECK_COLLECTIVES", "1"},
                                {"RTD_CE_STAGED", "1"},
                                {"RTD_NCCL_DIRECT_INIT", "1"}});
  EXPECT_TRUE(on.recovery_join && on.check_collectives && on.ce_staged && on.nccl_direct_init);
  Config off = Config::from_env({{"RTD_CE_STAGED", "0"}, {"RTD_NCCL_DIRECT_INIT", "0"}});
  EXPECT_FALSE(off.recovery_join || off.check_collectives || off.ce_staged || off.nccl_direct_init);
  EXPECT_TRUE(Config::from_env({}).nccl_direct_init) << "the direct NCCL init is the default";
}

TEST(Config, TrailingGarbageAndNegativesAreRejected) {
  EXPECT_THROW(Config::from_env({{"WORLD_SIZE", "4x"}}), Error);
  EXPECT_THROW(Config::from_env({{"WORLD_SIZE", "0"}}), Error);
  EXPECT_THROW(Config::from_env({{"LOCAL_RANK", "-1"}}), Error);
  EXPECT_THROW(Config::from_env({{"RTD_TIMEOUT_S", "0"}}), Error);
  EXPECT_THROW(Config::from_env({{"RTD_BACKEND", "carrier-pigeon"}}), Error);
  EXPECT_THROW(Config::from_env({{"RTD_NCCL_CTA_POLICY", "frugal"}}), Error);
  EXPECT_THROW(Config::from_env({{"RTD_CE_REDUCE_BLOCKS", "0"}}), Error);
  EXPECT_EQ(Config::from_env({{"RTD_CE_REDUCE_BLOCKS", "16"}}).ce_reduce_blocks, 16);
  EXPECT_THROW(Config::from_env({{"RTD_CE_COPY_STREAMS", "0"}}), Error);
  EXPECT_EQ(Config::from_env({{"RTD_CE_COPY_STREAMS", "4"}}).ce_copy_streams, 4);
  EXPECT_THROW(Config::from_env({{"RTD_HANG_WARN_S", "-1"}}), Error);
  EXPECT_THROW(Config::from_env({{"RTD_CHECK_COLLECTIVES", "2"}}), Error);
  EXPECT_TRUE(Config::from_env({{"RTD_CHECK_COLLECTIVES", "1"}}).check_collectives);
  EXPECT_FALSE(Config::from_env({}).check_collectives);
  EXPECT_EQ(Config::from_env({}).hang_warn, std::chrono::seconds(60));
  EXPECT_EQ(Config::from_env({{"RTD_HANG_WARN_S", "0"}}).hang_warn, std::chrono::seconds(0));
  EXPECT_EQ(Config::from_env({}).ce_reduce_blocks, -1);
  EXPECT_EQ(Config::from_env({}).ce_copy_streams, 0);
}

TEST(Config, NcclCtaPolicy) {
  EXPECT_EQ(Config::from_env({}).nccl_cta_policy, "");
  for (const char* policy : {"default", "efficiency", "zero"}) {
    EXPECT_EQ(Config::from_env({{"RTD_NCCL_CTA_POLICY", policy}}).nccl_cta_policy, policy);
  }
}

TEST(Config, TableListsEveryVariableOnce) {
  std::set<std::string> names;
  for (const auto& var : config_table()) {
    EXPECT_TRUE(names.insert(var.name).second) << var.name;
    EXPECT_GT(std::string(var.doc).size(), 5u) << var.name;
    EXPECT_GT(std::string(var.unit).size(), 0u) << var.name;
    EXPECT_GT(std::string(var.readers).size(), 0u) << var.name;
  }
  for (const char* name : {"RANK", "WORLD_SIZE", "DTRUN_STORE", "DTRUN_TOKEN", "RTD_LOG"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
}

// One parser behaviour for a bad value: a 0/1 variable that is neither is
// an error naming it (DTRUN_REQUIRE_TOKEN=2 used to count as 1).
TEST(LauncherConfig, ASwitchThatIsNeither0Nor1IsNamed) {
  for (const char* bad : {"2", "yes", "-1"}) {
    try {
      launcher_config_from_env({{"DTRUN_REQUIRE_TOKEN", bad}});
      ADD_FAILURE() << "DTRUN_REQUIRE_TOKEN=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DTRUN_REQUIRE_TOKEN"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(launcher_config_from_env({{"DTRUN_REQUIRE_TOKEN", "1"}}).require_token);
  EXPECT_FALSE(launcher_config_from_env({{"DTRUN_REQUIRE_TOKEN", "0"}}).require_token);
}

TEST(LauncherConfig, ReadsOnlyTheLaunchersVariables) {
  LauncherConfig c = launcher_config_from_env({{"DTRUN_TOKEN", "t"}, {"RANK", "garbage"}});
  EXPECT_EQ(c.token, "t");
  EXPECT_EQ(c.log_spec, "info");
}

TEST(LauncherConfig, TheStoresQuotaAndTlsFiles) {
  LauncherConfig c = launcher_config_from_env({});
  EXPECT_EQ(c.store_max_keys, 262144);
  EXPECT_EQ(c.store_max_mb, 256);
  EXPECT_FALSE(c.tls.enabled());
  c = launcher_config_from_env({{"DTRUN_STORE_MAX_KEYS", "5000"},
                                {"DTRUN_STORE_MAX_MB", "64"},
                                {"DTRUN_TLS_CERT", "c.pem"}});
  EXPECT_EQ(c.store_max_keys, 5000);
  EXPECT_EQ(c.store_max_mb, 64);
  EXPECT_EQ(c.tls.cert, "c.pem");
  EXPECT_THROW(launcher_config_from_env({{"DTRUN_STORE_MAX_KEYS", "10"}}), Error);
  EXPECT_THROW(launcher_config_from_env({{"DTRUN_STORE_MAX_MB", "lots"}}), Error);
}

}  // namespace
// In-process recovery's variables: dtrun writes them; a malformed one is
// named, not taken as something else.
TEST(Config, RecoveryVariables) {
  Config off = Config::from_env({});
  EXPECT_EQ(off.recovery, "");
  EXPECT_EQ(off.generation, 0);
  EXPECT_EQ(off.recovery_wait, std::chrono::seconds(60));
  Config on = Config::from_env(
      {{"DTRUN_RECOVERY", "in-process"}, {"DTRUN_GENERATION", "3"}, {"RTD_RECOVERY_WAIT_S", "5"}});
  EXPECT_EQ(on.recovery, "in-process");
  EXPECT_EQ(on.generation, 3);
  EXPECT_EQ(on.recovery_wait, std::chrono::seconds(5));
  for (const EnvMap& bad :
       {EnvMap{{"DTRUN_RECOVERY", "yes"}}, EnvMap{{"DTRUN_GENERATION", "-1"}},
        EnvMap{{"DTRUN_GENERATION", "2x"}}, EnvMap{{"RTD_RECOVERY_WAIT_S", "0"}}}) {
    try {
      Config::from_env(bad);
      ADD_FAILURE() << bad.begin()->first << "=" << bad.begin()->second << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.begin()->first), std::string::npos) << e.what();
    }
  }
}

}  // namespace rtd
