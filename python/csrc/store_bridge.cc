#include "store_bridge.h"

#include <chrono>
#include <exception>
#include <string>
#include <vector>

namespace rtd_torch {
namespace {

c10d::Store& of(void* self) { return *static_cast<c10d::Store*>(self); }

// Every callback answers 0 or 1: librt_dist turns 1 into an error naming
// the key, and no exception may cross the C interface.
template <typename F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int set(void* self, const char* key, const void* value, size_t len) {
  return guarded([&] {
    const auto* p = static_cast<const uint8_t*>(value);
    of(self).set(key, std::vector<uint8_t>(p, p + len));
  });
}

int get(void* self, const char* key, int64_t timeout_ms, void* reply) {
  return guarded([&] {
    if (timeout_ms > 0) {
      of(self).wait({key}, std::chrono::milliseconds(timeout_ms));
    }
    const std::vector<uint8_t> value = of(self).get(key);
    rtd_store_reply(reply, value.data(), value.size());
  });
}

int add(void* self, const char* key, int64_t delta, int64_t* result) {
  return guarded([&] { *result = of(self).add(key, delta); });
}

int check(void* self, const char* key, int* exists) {
  return guarded([&] { *exists = of(self).check({key}) ? 1 : 0; });
}

int remove(void* self, const char* key) {
  return guarded([&] { of(self).deleteKey(key); });
}

}  // namespace

StoreBridge::StoreBridge(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  ops_.self = store_.get();
  ops_.set = set;
  ops_.get = get;
  ops_.add = add;
  ops_.check = check;
  ops_.remove = remove;
}

}  // namespace rtd_torch
