// The C interface's checkpoints (rtd_ckpt_*): a save and a load through the
// caller's store callbacks, the meta handed back, `newest` bounding the
// load, the newest readable manifest, and a named error for each malformed
// argument.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "rt_dist/c_api.h"

namespace {

// A store of one process, over the C callbacks (a world of one: a key is
// always set before it is read).
struct MapStore {
  std::mutex mutex;
  std::map<std::string, std::string> keys;
  rtd_store_ops ops() {
    return rtd_store_ops{this,
                         [](void* self, const char* key, const void* value, size_t len) {
                           auto* s = static_cast<MapStore*>(self);
                           std::lock_guard<std::mutex> lock(s->mutex);
                           s->keys[key].assign(static_cast<const char*>(value), len);
                           return 0;
                         },
                         [](void* self, const char* key, int64_t, void* reply) {
                           auto* s = static_cast<MapStore*>(self);
                           std::lock_guard<std::mutex> lock(s->mutex);
                           auto it = s->keys.find(key);
                           if (it == s->keys.end()) return 1;
                           rtd_store_reply(reply, it->second.data(), it->second.size());
                           return 0;
                         },
                         [](void* self, const char* key, int64_t delta, int64_t* result) {
                           auto* s = static_cast<MapStore*>(self);
                           std::lock_guard<std::mutex> lock(s->mutex);
                           std::string& v = s->keys[key];
                           *result = (v.empty() ? 0 : std::stoll(v)) + delta;
                           v = std::to_string(*result);
                           return 0;
                         },
                         [](void* self, const char* key, int* exists) {
                           auto* s = static_cast<MapStore*>(self);
                           std::lock_guard<std::mutex> lock(s->mutex);
                           *exists = s->keys.count(key) ? 1 : 0;
                           return 0;
                         },
                         [](void* self, const char* key) {
                           auto* s = static_cast<MapStore*>(self);
                           std::lock_guard<std::mutex> lock(s->mutex);
                           s->keys.erase(key);
                           return 0;
                         }};
  }
};

std::string fresh_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   (std::string("rtd_c_api_ckpt_") + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

struct Meta {
  std::map<std::string, std::string> entries;
  static void add(void* arg, const char* key, const char* value) {
    static_cast<Meta*>(arg)->entries[key] = value;
  }
};

TEST(CApiCheckpoint, SavesLoadsAndBoundsTheLoadByStep) {
  MapStore store;
  const rtd_store_ops ops = store.ops();
  const std::string dir = fresh_dir("roundtrip");
  const rtd_ckpt_options options{dir.c_str(), 0, 2, 16};  // pieces of 16 bytes: several
  rtd_ckpt* ckpt = rtd_ckpt_create(&ops, 0, 1, &options);
  ASSERT_NE(ckpt, nullptr) << rtd_last_error();
  const int64_t shape[] = {3, 4};
  for (int step = 1; step <= 2; ++step) {
    std::vector<float> w(12);
    for (int i = 0; i < 12; ++i) w[i] = static_cast<float>(step * 100 + i);
    // Two ranges, as a chunk cut along the second dimension would be.
    const rtd_ckpt_range ranges[] = {{0, 6, w.data(), -1}, {6, 6, w.data() + 6, -1}};
    const rtd_ckpt_tensor t{"w", RTD_FLOAT32, 2, shape, 2, ranges};
    const std::string note = "step " + std::to_string(step);
    const char* meta[] = {"note", note.c_str()};
    ASSERT_EQ(rtd_ckpt_save(ckpt, step, &t, 1, meta, 1), 0) << rtd_last_error();
  }
  std::vector<float> got(12, -1.0f);
  const rtd_ckpt_range into[] = {{4, 8, got.data(), -1}};
  const rtd_ckpt_tensor t{"w", RTD_FLOAT32, 2, shape, 1, into};
  int64_t step = -7;
  Meta meta;
  ASSERT_EQ(rtd_ckpt_load(ckpt, &t, 1, -1, 1, &step, &Meta::add, &meta), 0) << rtd_last_error();
  EXPECT_EQ(step, 2);
  EXPECT_EQ(got[0], 204.0f);
  EXPECT_EQ(got[7], 211.0f);
  EXPECT_EQ(meta.entries["note"], "step 2");
  ASSERT_EQ(rtd_ckpt_load(ckpt, &t, 1, 1, 0, &step, &Meta::add, &meta), 0) << rtd_last_error();
  EXPECT_EQ(step, 1);
  EXPECT_EQ(got[0], 104.0f);
  EXPECT_EQ(meta.entries["note"], "step 1");

  int64_t manifest_step = -1;
  char* json = rtd_ckpt_read_manifest(dir.c_str(), -1, &manifest_step);
  ASSERT_NE(json, nullptr) << rtd_last_error();
  EXPECT_EQ(manifest_step, 2);
  EXPECT_NE(std::string(json).find("\"note\""), std::string::npos) << json;
  rtd_free(json);
  json = rtd_ckpt_read_manifest(dir.c_str(), 1, &manifest_step);
  ASSERT_NE(json, nullptr) << rtd_last_error();
  EXPECT_EQ(manifest_step, 1);
  rtd_free(json);
  // A manifest that fails its check is passed over for the one before.
  std::ofstream(dir + "/step_00000002/manifest.json", std::ios::app) << " ";
  std::ofstream(dir + "/step_00000002/manifest.json", std::ios::in | std::ios::out) << "[";
  json = rtd_ckpt_read_manifest(dir.c_str(), -1, &manifest_step);
  ASSERT_NE(json, nullptr) << rtd_last_error();
  EXPECT_EQ(manifest_step, 1);
  rtd_free(json);
  rtd_ckpt_destroy(ckpt);
  std::filesystem::remove_all(dir);
}

TEST(CApiCheckpoint, MalformedArgumentsAreNamed) {
  MapStore store;
  const rtd_store_ops ops = store.ops();
  const std::string dir = fresh_dir("refusals");
  const rtd_ckpt_options bad_threads{dir.c_str(), 3, 0, 1};
  EXPECT_EQ(rtd_ckpt_create(&ops, 0, 1, &bad_threads), nullptr);
  EXPECT_NE(std::string(rtd_last_error()).find("io_threads 0"), std::string::npos);
  const rtd_ckpt_options options{dir.c_str(), 3, 1, 1 << 20};
  EXPECT_EQ(rtd_ckpt_create(&ops, 1, 1, &options), nullptr);
  EXPECT_NE(std::string(rtd_last_error()).find("rank 1 of 1"), std::string::npos);
  rtd_ckpt* ckpt = rtd_ckpt_create(&ops, 0, 1, &options);
  ASSERT_NE(ckpt, nullptr) << rtd_last_error();
  float data[4] = {};
  const int64_t shape[] = {4};
  struct Case {
    const char* words;
    rtd_ckpt_range range;
    rtd_ckpt_tensor tensor;
  };
  Case cases[] = {
      {"has no name", {0, 4, data, -1}, {"", RTD_FLOAT32, 1, shape, 1, nullptr}},
      {"dtype 9", {0, 4, data, -1}, {"x", 9, 1, shape, 1, nullptr}},
      {"-1 dimensions", {0, 4, data, -1}, {"x", RTD_FLOAT32, -1, shape, 1, nullptr}},
      {"range 0 is negative", {-1, 4, data, -1}, {"x", RTD_FLOAT32, 1, shape, 1, nullptr}},
      {"'x'", {2, 4, data, -1}, {"x", RTD_FLOAT32, 1, shape, 1, nullptr}},  // past its end
  };
  for (Case& c : cases) {
    c.tensor.ranges = &c.range;
    EXPECT_NE(rtd_ckpt_save(ckpt, 1, &c.tensor, 1, nullptr, 0), 0) << c.words;
    const std::string error = rtd_last_error();
    EXPECT_NE(error.find(c.words), std::string::npos) << error;
  }
  EXPECT_NE(rtd_ckpt_save(ckpt, -3, nullptr, 0, nullptr, 0), 0);
  EXPECT_NE(std::string(rtd_last_error()).find("step -3"), std::string::npos);
  int64_t step = 0;
  EXPECT_EQ(rtd_ckpt_read_manifest(dir.c_str(), -1, &step), nullptr);
  EXPECT_NE(std::string(rtd_last_error()).find("none is committed"), std::string::npos)
      << rtd_last_error();
  int64_t loaded = 5;
  EXPECT_EQ(rtd_ckpt_load(ckpt, nullptr, 0, -1, 1, &loaded, nullptr, nullptr), 0);
  EXPECT_EQ(loaded, -1);  // no checkpoint there
  rtd_ckpt_destroy(ckpt);
  std::filesystem::remove_all(dir);
}

}  // namespace
