#include "job_store.h"

#include <c10/util/Exception.h>

#include <memory>

namespace rtd_torch {
namespace {

[[noreturn]] void raise_store_error(const std::string& what) {
  const std::string message = rtd_last_error();
  if (rtd_last_error_category() == 4) {  // a timeout: torch's stores say it so
    C10_THROW_ERROR(DistStoreError, "rtd job store: " + what + ": Timeout (" + message + ")");
  }
  C10_THROW_ERROR(DistStoreError, "rtd job store: " + what + ": " + message);
}

}  // namespace

JobStore::JobStore(std::chrono::milliseconds timeout) : c10d::Store(timeout) {
  handle_ = rtd_job_store_open();
  if (handle_ == nullptr) raise_store_error("cannot open");
}

JobStore::~JobStore() { rtd_job_store_close(handle_); }

c10::intrusive_ptr<c10d::Store> JobStore::clone() {
  return c10::make_intrusive<JobStore>(timeout_);
}

void JobStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (rtd_job_store_set(handle_, key.c_str(), value.data(), value.size()) != 0)
    raise_store_error("set of '" + key + "'");
}

std::vector<uint8_t> JobStore::get_within(const std::string& key,
                                          std::chrono::milliseconds timeout) {
  void* data = nullptr;
  size_t len = 0;
  // At least a millisecond: 0 would ask whether the key is there now.
  const int64_t ms = std::max<int64_t>(1, timeout.count());
  if (rtd_job_store_get(handle_, key.c_str(), ms, &data, &len) != 0)
    raise_store_error("get of '" + key + "'");
  std::unique_ptr<void, void (*)(void*)> owned(data, rtd_free);
  const auto* p = static_cast<const uint8_t*>(data);
  return std::vector<uint8_t>(p, p + len);
}

std::vector<uint8_t> JobStore::get(const std::string& key) { return get_within(key, timeout_); }

int64_t JobStore::add(const std::string& key, int64_t value) {
  int64_t result = 0;
  if (rtd_job_store_add(handle_, key.c_str(), value, &result) != 0)
    raise_store_error("add to '" + key + "'");
  return result;
}

bool JobStore::deleteKey(const std::string& key) {
  int removed = 0;
  if (rtd_job_store_remove(handle_, key.c_str(), &removed) != 0)
    raise_store_error("delete of '" + key + "'");
  return removed != 0;
}

bool JobStore::check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    int exists = 0;
    if (rtd_job_store_check(handle_, key.c_str(), &exists) != 0)
      raise_store_error("check of '" + key + "'");
    if (!exists) return false;
  }
  return true;
}

int64_t JobStore::getNumKeys() {
  C10_THROW_ERROR(NotImplementedError,
                  "rtd job store: the number of keys is not offered (dtrun's store holds every "
                  "round's and generation's keys)");
}

void JobStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void JobStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    get_within(key, left);
  }
}

rtd_job_info read_job_info() {
  rtd_job_info info{};
  if (rtd_job_info_read(&info) != 0) {
    C10_THROW_ERROR(ValueError, std::string("rtd: ") + rtd_last_error());
  }
  return info;
}

}  // namespace rtd_torch
