// The C interface's job store and job information (rt_dist/c_api.h): dtrun's
// store under the worker's round, opened from dtrun's variables, and refused
// with a reason where they are missing or malformed.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "rt_dist/c_api.h"
#include "rt_dist/store.h"
#include "runtime/core/store/store_server.h"

namespace {

using std::chrono::milliseconds;

// Sets variables for one test and puts the old values back.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = getenv(name);
      saved_.push_back({name, old != nullptr, old ? old : ""});
      if (value) {
        setenv(name, value, 1);
      } else {
        unsetenv(name);
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& s : saved_) {
      if (s.had) {
        setenv(s.name.c_str(), s.value.c_str(), 1);
      } else {
        unsetenv(s.name.c_str());
      }
    }
  }

 private:
  struct Saved {
    std::string name;
    bool had;
    std::string value;
  };
  std::vector<Saved> saved_;
};

std::string get(rtd_job_store* s, const char* key, int64_t timeout_ms) {
  void* value = nullptr;
  size_t len = 0;
  if (rtd_job_store_get(s, key, timeout_ms, &value, &len) != 0) return "<failed>";
  std::string out(static_cast<const char*>(value), len);
  rtd_free(value);
  return out;
}

TEST(CApiJob, WithoutDtrunTheStoreIsRefusedSayingWhy) {
  ScopedEnv env{{"DTRUN_STORE", nullptr}};
  EXPECT_EQ(rtd_job_store_open(), nullptr);
  EXPECT_EQ(rtd_last_error_category(), 2);  // configuration
  EXPECT_NE(std::string(rtd_last_error()).find("DTRUN_STORE is not set"), std::string::npos)
      << rtd_last_error();
}

TEST(CApiJob, TheStoreIsDtrunsUnderTheRound) {
  rtd::StoreServer server("127.0.0.1", 0, "secret");
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());
  ScopedEnv env{{"DTRUN_STORE", addr.c_str()}, {"DTRUN_TOKEN", "secret"}, {"DTRUN_ROUND", "3"}};
  rtd_job_store* s = rtd_job_store_open();
  ASSERT_NE(s, nullptr) << rtd_last_error();
  ASSERT_EQ(rtd_job_store_set(s, "k", "v\0w", 3), 0) << rtd_last_error();
  EXPECT_EQ(get(s, "k", 0), std::string("v\0w", 3));
  EXPECT_EQ(get(s, "k", 1000), std::string("v\0w", 3));
  int64_t n = 0;
  ASSERT_EQ(rtd_job_store_add(s, "n", 5, &n), 0);
  ASSERT_EQ(rtd_job_store_add(s, "n", 0, &n), 0);
  EXPECT_EQ(n, 5);
  int exists = -1;
  ASSERT_EQ(rtd_job_store_check(s, "k", &exists), 0);
  EXPECT_EQ(exists, 1);
  // Under the round's prefix, as librt_dist's contexts see the store.
  auto direct = rtd::make_grpc_store(addr, "secret");
  EXPECT_EQ(direct->get("round3/k", milliseconds(1000)), std::string("v\0w", 3));
  int removed = -1;
  ASSERT_EQ(rtd_job_store_remove(s, "k", &removed), 0);
  EXPECT_EQ(removed, 1);
  ASSERT_EQ(rtd_job_store_check(s, "k", &exists), 0);
  EXPECT_EQ(exists, 0);
  // A key that does not come is a timeout; a NULL or empty key an invalid argument.
  EXPECT_EQ(get(s, "never", 50), "<failed>");
  EXPECT_EQ(rtd_last_error_category(), 4);
  EXPECT_EQ(get(s, "never", 0), "<failed>");
  EXPECT_EQ(rtd_last_error_category(), 4);
  EXPECT_NE(rtd_job_store_set(s, "", "v", 1), 0);
  EXPECT_EQ(rtd_last_error_category(), 1);
  EXPECT_NE(rtd_job_store_set(s, nullptr, "v", 1), 0);
  EXPECT_NE(rtd_job_store_set(nullptr, "k", "v", 1), 0);
  EXPECT_NE(rtd_job_store_get(s, "k", -1, nullptr, nullptr), 0);
  EXPECT_NE(rtd_job_store_set(s, std::string(5000, 'k').c_str(), "v", 1), 0);
  EXPECT_NE(std::string(rtd_last_error()).find("4096 bytes"), std::string::npos);
  rtd_job_store_close(s);
  rtd_job_store_close(nullptr);
}

TEST(CApiJob, AWrongTokenIsRefused) {
  rtd::StoreServer server("127.0.0.1", 0, "secret");
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());
  ScopedEnv env{{"DTRUN_STORE", addr.c_str()}, {"DTRUN_TOKEN", "wrong"}};
  rtd_job_store* s = rtd_job_store_open();
  ASSERT_NE(s, nullptr) << rtd_last_error();  // connecting asks nothing yet
  EXPECT_NE(rtd_job_store_set(s, "k", "v", 1), 0);
  rtd_job_store_close(s);
}

TEST(CApiJob, InfoSaysWhatDtrunSaid) {
  ScopedEnv env{{"RANK", "2"},
                {"WORLD_SIZE", "3"},
                {"LOCAL_RANK", "2"},
                {"LOCAL_WORLD_SIZE", "3"},
                {"DTRUN_ROUND", "1"},
                {"DTRUN_GENERATION", "4"},
                {"DTRUN_RECOVERY", "in-process"},
                {"DTRUN_RECOVERY_JOIN", "1"},
                {"RTD_RECOVERY_WAIT_S", "7"},
                {"RTD_TIMEOUT_S", "9"}};
  rtd_job_info info{};
  ASSERT_EQ(rtd_job_info_read(&info), 0) << rtd_last_error();
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.round, 1);
  EXPECT_EQ(info.generation, 4);
  EXPECT_EQ(info.recovery, 1);
  EXPECT_EQ(info.joining, 1);
  EXPECT_EQ(info.recovery_wait_ms, 7000);
  EXPECT_EQ(info.timeout_ms, 9000);
  EXPECT_NE(rtd_job_info_read(nullptr), 0);
}

TEST(CApiJob, AMalformedVariableIsNamed) {
  ScopedEnv env{{"DTRUN_GENERATION", "two"}};
  rtd_job_info info{};
  EXPECT_NE(rtd_job_info_read(&info), 0);
  EXPECT_NE(std::string(rtd_last_error()).find("DTRUN_GENERATION"), std::string::npos)
      << rtd_last_error();
}

}  // namespace
