// The C interface's job store and job information (rt_dist/c_api.h): dtrun's
// store under the worker's round, and what dtrun's variables say of the
// worker, for callers that keep state across a lost worker (rt_dist.torch's
// in-process recovery).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "rt_dist/c_api.h"
#include "runtime/c_api_errors.h"
#include "runtime/core/config.h"
#include "runtime/core/store/grpc_store.h"
#include "runtime/env.h"

struct rtd_job_store {
  std::shared_ptr<rtd::Store> store;
};

namespace {

using rtd::Error;
using rtd::ErrorCategory;
using rtd::c_api::guarded;

// Keys and values cross a network: bounded here as the store's server bounds them.
constexpr std::size_t kMaxKeyBytes = 4096;

rtd::Store& checked(rtd_job_store* store, const char* key) {
  if (!store || !store->store)
    throw Error(ErrorCategory::kInvalidArgument, "job store: the handle is NULL");
  if (!key || !*key) throw Error(ErrorCategory::kInvalidArgument, "job store: an empty key");
  if (std::strlen(key) > kMaxKeyBytes)
    throw Error(ErrorCategory::kInvalidArgument,
                "job store: a key of more than " + std::to_string(kMaxKeyBytes) + " bytes");
  return *store->store;
}

void require(const void* out, const char* what) {
  if (!out)
    throw Error(ErrorCategory::kInvalidArgument, std::string("job store: no place for ") + what);
}

}  // namespace

extern "C" {

rtd_job_store* rtd_job_store_open(void) {
  return guarded<rtd_job_store*>(nullptr, [] {
    const rtd::Config config = rtd::Config::from_env(rtd::read_process_env());
    if (config.store_addr.empty())
      throw Error(ErrorCategory::kConfig,
                  "the job's store is dtrun's and DTRUN_STORE is not set: start the job with "
                  "dtrun (dtrun --nproc-per-node=N python train.py)");
    auto root = rtd::make_grpc_store(config.store_addr, config.token, "", config.tls);
    auto handle = std::make_unique<rtd_job_store>();
    handle->store = rtd::make_prefix_store("round" + std::to_string(config.round), root);
    return handle.release();
  });
}

int rtd_job_store_set(rtd_job_store* store, const char* key, const void* value, size_t len) {
  return guarded<int>(1, [&] {
    rtd::Store& s = checked(store, key);
    if (len > 0) require(value, "the value");
    s.set(key, std::string(static_cast<const char*>(value), len));
    return 0;
  });
}

int rtd_job_store_get(rtd_job_store* store, const char* key, int64_t timeout_ms, void** value,
                      size_t* len) {
  return guarded<int>(1, [&] {
    rtd::Store& s = checked(store, key);
    require(value, "the value");
    require(len, "the length");
    if (timeout_ms < 0)
      throw Error(ErrorCategory::kInvalidArgument, "job store: a negative timeout");
    std::string got;
    if (timeout_ms == 0) {
      auto found = s.try_get(key);
      if (!found)
        throw Error(ErrorCategory::kTimeout, std::string("job store: no key '") + key + "'");
      got = std::move(*found);
    } else {
      got = s.get(key, std::chrono::milliseconds(timeout_ms));
    }
    void* copy = std::malloc(got.empty() ? 1 : got.size());
    if (!copy) throw Error(ErrorCategory::kInternal, "job store: out of memory for a value");
    if (!got.empty()) std::memcpy(copy, got.data(), got.size());
    *value = copy;
    *len = got.size();
    return 0;
  });
}

int rtd_job_store_add(rtd_job_store* store, const char* key, int64_t delta, int64_t* result) {
  return guarded<int>(1, [&] {
    rtd::Store& s = checked(store, key);
    require(result, "the result");
    *result = s.add(key, delta);
    return 0;
  });
}

int rtd_job_store_check(rtd_job_store* store, const char* key, int* exists) {
  return guarded<int>(1, [&] {
    rtd::Store& s = checked(store, key);
    require(exists, "the answer");
    *exists = s.check({key}) ? 1 : 0;
    return 0;
  });
}

int rtd_job_store_remove(rtd_job_store* store, const char* key, int* removed) {
  return guarded<int>(1, [&] {
    rtd::Store& s = checked(store, key);
    const bool gone = s.remove(key);
    if (removed) *removed = gone ? 1 : 0;
    return 0;
  });
}

void rtd_job_store_close(rtd_job_store* store) { delete store; }

int rtd_job_info_read(rtd_job_info* info) {
  return guarded<int>(1, [&] {
    if (!info) throw Error(ErrorCategory::kInvalidArgument, "job info: no place for it");
    const rtd::Config config = rtd::Config::from_env(rtd::read_process_env());
    const rtd::WorldInfo world = rtd::detect_world(config);
    *info = rtd_job_info{};
    info->rank = world.rank;
    info->world_size = world.world_size;
    info->round = config.round;
    info->generation = config.generation;
    info->recovery = config.recovery == "in-process" ? 1 : 0;
    info->joining = config.recovery_join ? 1 : 0;
    info->recovery_wait_ms = config.recovery_wait.count();
    info->timeout_ms = config.timeout.count();
    return 0;
  });
}

}  // extern "C"
