// The real NcclApi: one NCCL call per method, into libnccl.so.2 opened with
// dlopen at the first NCCL communicator, so that librt_dist loads (and the
// Gloo and MPI backends run) on machines without NCCL, and uses whichever
// NCCL the machine has.
#include "collectives/nccl/nccl_api.h"

#include <dlfcn.h>

#include <string>

#include "rt_dist/error.h"

namespace rtd::nccl {
namespace {

void* open_nccl() {
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    throw Error(ErrorCategory::kBackend,
                std::string("the NCCL backend needs libnccl.so.2, which does not load (") +
                    dlerror() +
                    "): install NCCL (libnccl2, or NVIDIA's CUDA image), put its directory on "
                    "LD_LIBRARY_PATH, or use RTD_BACKEND=gloo");
  }
  return lib;
}

// The NCCL functions, resolved once: each pointer has the type nccl.h declares.
struct Functions {
  void* lib = open_nccl();
  template <typename Fn>
  Fn* get(Fn*, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) {
      throw Error(ErrorCategory::kBackend,
                  std::string("libnccl.so.2 has no ") + name +
                      ": it is older than this build of rt_dist needs (NCCL 2.19 or newer)");
    }
    return reinterpret_cast<Fn*>(p);
  }
#define RTD_NCCL_FN(name) decltype(&name) name##_ = get(&name, #name)
  RTD_NCCL_FN(ncclGetUniqueId);
  RTD_NCCL_FN(ncclCommInitRankConfig);
  RTD_NCCL_FN(ncclCommSplit);
  RTD_NCCL_FN(ncclCommGetAsyncError);
  RTD_NCCL_FN(ncclCommFinalize);
  RTD_NCCL_FN(ncclCommDestroy);
  RTD_NCCL_FN(ncclCommAbort);
  RTD_NCCL_FN(ncclCommUserRank);
  RTD_NCCL_FN(ncclCommCount);
  RTD_NCCL_FN(ncclGroupStart);
  RTD_NCCL_FN(ncclGroupEnd);
  RTD_NCCL_FN(ncclAllReduce);
  RTD_NCCL_FN(ncclBroadcast);
  RTD_NCCL_FN(ncclReduceScatter);
  RTD_NCCL_FN(ncclAllGather);
  RTD_NCCL_FN(ncclSend);
  RTD_NCCL_FN(ncclRecv);
  RTD_NCCL_FN(ncclMemAlloc);
  RTD_NCCL_FN(ncclMemFree);
  RTD_NCCL_FN(ncclCommRegister);
  RTD_NCCL_FN(ncclCommDeregister);
  RTD_NCCL_FN(ncclGetErrorString);
  RTD_NCCL_FN(ncclGetLastError);
#undef RTD_NCCL_FN
};

class RealNcclApi : public NcclApi {
 public:
  ncclResult_t get_unique_id(ncclUniqueId* id) override { return f_.ncclGetUniqueId_(id); }
  ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                     ncclConfig_t* config) override {
    return f_.ncclCommInitRankConfig_(comm, nranks, id, rank, config);
  }
  ncclResult_t comm_split(ncclComm_t comm, int color, int key, ncclComm_t* out,
                          ncclConfig_t* config) override {
    return f_.ncclCommSplit_(comm, color, key, out, config);
  }
  ncclResult_t comm_get_async_error(ncclComm_t comm, ncclResult_t* state) override {
    return f_.ncclCommGetAsyncError_(comm, state);
  }
  ncclResult_t comm_finalize(ncclComm_t comm) override { return f_.ncclCommFinalize_(comm); }
  ncclResult_t comm_destroy(ncclComm_t comm) override { return f_.ncclCommDestroy_(comm); }
  ncclResult_t comm_abort(ncclComm_t comm) override { return f_.ncclCommAbort_(comm); }
  ncclResult_t comm_user_rank(ncclComm_t comm, int* rank) override {
    return f_.ncclCommUserRank_(comm, rank);
  }
  ncclResult_t comm_count(ncclComm_t comm, int* count) override {
    return f_.ncclCommCount_(comm, count);
  }
  ncclResult_t group_start() override { return f_.ncclGroupStart_(); }
  ncclResult_t group_end() override { return f_.ncclGroupEnd_(); }
  ncclResult_t all_reduce(const void* in, void* out, size_t count, ncclDataType_t type,
                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return f_.ncclAllReduce_(in, out, count, type, op, comm, stream);
  }
  ncclResult_t broadcast(const void* in, void* out, size_t count, ncclDataType_t type, int root,
                         ncclComm_t comm, cudaStream_t stream) override {
    return f_.ncclBroadcast_(in, out, count, type, root, comm, stream);
  }
  ncclResult_t reduce_scatter(const void* in, void* out, size_t recv_count, ncclDataType_t type,
                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return f_.ncclReduceScatter_(in, out, recv_count, type, op, comm, stream);
  }
  ncclResult_t all_gather(const void* in, void* out, size_t send_count, ncclDataType_t type,
                          ncclComm_t comm, cudaStream_t stream) override {
    return f_.ncclAllGather_(in, out, send_count, type, comm, stream);
  }
  ncclResult_t send(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return f_.ncclSend_(buf, count, type, peer, comm, stream);
  }
  ncclResult_t recv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return f_.ncclRecv_(buf, count, type, peer, comm, stream);
  }
  ncclResult_t mem_alloc(void** ptr, size_t bytes) override { return f_.ncclMemAlloc_(ptr, bytes); }
  ncclResult_t mem_free(void* ptr) override { return f_.ncclMemFree_(ptr); }
  ncclResult_t comm_register(ncclComm_t comm, void* buf, size_t bytes, void** handle) override {
    return f_.ncclCommRegister_(comm, buf, bytes, handle);
  }
  ncclResult_t comm_deregister(ncclComm_t comm, void* handle) override {
    return f_.ncclCommDeregister_(comm, handle);
  }
  const char* error_string(ncclResult_t result) override { return f_.ncclGetErrorString_(result); }
  const char* last_error(ncclComm_t comm) override { return f_.ncclGetLastError_(comm); }

 private:
  Functions f_;
};

}  // namespace

std::shared_ptr<NcclApi> real_nccl_api() {
  static auto api = std::make_shared<RealNcclApi>();
  return api;
}

}  // namespace rtd::nccl
