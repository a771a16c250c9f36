#include "c_api_loader.h"

#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <mutex>

#include "rt_dist/c_api.h"

namespace rtd_torch {
namespace {

// The functions the backend calls, as librt_dist defines them.
// clang-format off
#define RTD_C_API_FUNCTIONS(X)                                                         \
  X(rtd_c_api_version) X(rtd_last_error) X(rtd_last_error_category) X(rtd_store_reply) \
  X(rtd_comm_create_with) X(rtd_comm_destroy) X(rtd_comm_abort) X(rtd_comm_failed)           \
  X(rtd_all_reduce) X(rtd_broadcast) X(rtd_all_gather) X(rtd_reduce_scatter)            \
  X(rtd_all_to_all) X(rtd_barrier) X(rtd_send) X(rtd_recv) X(rtd_group)                 \
  X(rtd_work_done) X(rtd_work_wait) X(rtd_work_wait_stream) X(rtd_work_error)           \
  X(rtd_work_source) X(rtd_work_free) X(rtd_free)                                       \
  X(rtd_job_store_open) X(rtd_job_store_set) X(rtd_job_store_get) X(rtd_job_store_add)    \
  X(rtd_job_store_check) X(rtd_job_store_remove) X(rtd_job_store_close) X(rtd_job_info_read)
// clang-format on

struct Table {
#define RTD_SLOT(name) decltype(&::name) name = nullptr;
  RTD_C_API_FUNCTIONS(RTD_SLOT)
#undef RTD_SLOT
};

Table table;
std::mutex load_mu;
std::string loaded_path;

}  // namespace

void load_c_api(const std::string& path) {
  std::lock_guard<std::mutex> lock(load_mu);
  if (!loaded_path.empty()) {
    if (path != loaded_path) {
      throw pybind11::import_error("rt_dist.torch: librt_dist is already loaded from " +
                                   loaded_path + ", not " + path);
    }
    return;
  }
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    throw pybind11::import_error("rt_dist.torch: cannot open " + path + ": " + dlerror());
  }
  Table t;
#define RTD_RESOLVE(name)                                                                 \
  t.name = reinterpret_cast<decltype(t.name)>(dlsym(lib, #name));                         \
  if (t.name == nullptr) {                                                                \
    throw pybind11::import_error("rt_dist.torch: " + path +                               \
                                 " lacks " #name                                          \
                                 "; install librt_dist and rt_dist of the same release"); \
  }
  RTD_C_API_FUNCTIONS(RTD_RESOLVE)
#undef RTD_RESOLVE
  if (t.rtd_c_api_version() != RTD_C_API_VERSION) {
    throw pybind11::import_error(
        "rt_dist.torch: " + path + " offers the C interface version " +
        std::to_string(t.rtd_c_api_version()) + ", this extension was built for " +
        std::to_string(RTD_C_API_VERSION) + "; install librt_dist and rt_dist of the same release");
  }
  table = t;
  loaded_path = path;
}

}  // namespace rtd_torch

// The C interface, forwarded (hidden: this extension's own calls bind here).
using rtd_torch::table;
extern "C" {
int rtd_c_api_version(void) { return table.rtd_c_api_version(); }
const char* rtd_last_error(void) { return table.rtd_last_error(); }
int rtd_last_error_category(void) { return table.rtd_last_error_category(); }
void rtd_store_reply(void* reply, const void* data, size_t len) {
  table.rtd_store_reply(reply, data, len);
}
rtd_comm* rtd_comm_create_with(const rtd_store_ops* ops, const char* backend, const char* name,
                               int rank, int size, int device, const char* host, int64_t timeout_ms,
                               const rtd_comm_options* options) {
  return table.rtd_comm_create_with(ops, backend, name, rank, size, device, host, timeout_ms,
                                    options);
}
void rtd_comm_destroy(rtd_comm* comm) { table.rtd_comm_destroy(comm); }
void rtd_comm_abort(rtd_comm* comm) { table.rtd_comm_abort(comm); }
int rtd_comm_failed(rtd_comm* comm) { return table.rtd_comm_failed(comm); }
rtd_work* rtd_all_reduce(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int op,
                         int device, void* stream) {
  return table.rtd_all_reduce(comm, in, out, count, dtype, op, device, stream);
}
rtd_work* rtd_broadcast(rtd_comm* comm, void* buf, int64_t count, int dtype, int root, int device,
                        void* stream) {
  return table.rtd_broadcast(comm, buf, count, dtype, root, device, stream);
}
rtd_work* rtd_all_gather(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int device,
                         void* stream) {
  return table.rtd_all_gather(comm, in, out, count, dtype, device, stream);
}
rtd_work* rtd_reduce_scatter(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int op,
                             int device, void* stream) {
  return table.rtd_reduce_scatter(comm, in, out, count, dtype, op, device, stream);
}
rtd_work* rtd_all_to_all(rtd_comm* comm, void* in, void* out, int64_t count, int dtype, int device,
                         void* stream) {
  return table.rtd_all_to_all(comm, in, out, count, dtype, device, stream);
}
rtd_work* rtd_barrier(rtd_comm* comm, void* stream) { return table.rtd_barrier(comm, stream); }
rtd_work* rtd_send(rtd_comm* comm, void* buf, int64_t count, int dtype, int peer, int tag,
                   int device, void* stream) {
  return table.rtd_send(comm, buf, count, dtype, peer, tag, device, stream);
}
rtd_work* rtd_recv(rtd_comm* comm, void* buf, int64_t count, int dtype, int peer, int tag,
                   int device, void* stream) {
  return table.rtd_recv(comm, buf, count, dtype, peer, tag, device, stream);
}
rtd_work* rtd_group(rtd_comm* comm, const rtd_op* ops, int n, int device, void* stream) {
  return table.rtd_group(comm, ops, n, device, stream);
}
int rtd_work_done(rtd_work* work) { return table.rtd_work_done(work); }
int rtd_work_wait(rtd_work* work, int64_t timeout_ms) {
  return table.rtd_work_wait(work, timeout_ms);
}
int rtd_work_wait_stream(rtd_work* work, void* stream) {
  return table.rtd_work_wait_stream(work, stream);
}
int rtd_work_error(rtd_work* work) { return table.rtd_work_error(work); }
int rtd_work_source(rtd_work* work) { return table.rtd_work_source(work); }
void rtd_work_free(rtd_work* work) { table.rtd_work_free(work); }
void rtd_free(void* p) { table.rtd_free(p); }
rtd_job_store* rtd_job_store_open(void) { return table.rtd_job_store_open(); }
int rtd_job_store_set(rtd_job_store* store, const char* key, const void* value, size_t len) {
  return table.rtd_job_store_set(store, key, value, len);
}
int rtd_job_store_get(rtd_job_store* store, const char* key, int64_t timeout_ms, void** value,
                      size_t* len) {
  return table.rtd_job_store_get(store, key, timeout_ms, value, len);
}
int rtd_job_store_add(rtd_job_store* store, const char* key, int64_t delta, int64_t* result) {
  return table.rtd_job_store_add(store, key, delta, result);
}
int rtd_job_store_check(rtd_job_store* store, const char* key, int* exists) {
  return table.rtd_job_store_check(store, key, exists);
}
int rtd_job_store_remove(rtd_job_store* store, const char* key, int* removed) {
  return table.rtd_job_store_remove(store, key, removed);
}
void rtd_job_store_close(rtd_job_store* store) { table.rtd_job_store_close(store); }
int rtd_job_info_read(rtd_job_info* info) { return table.rtd_job_info_read(info); }
}
