// The real NcclApi: one NCCL call per method.
#include "collectives/nccl/nccl_api.h"

namespace rtd::nccl {
namespace {

class RealNcclApi : public NcclApi {
 public:
  ncclResult_t get_unique_id(ncclUniqueId* id) override { return ncclGetUniqueId(id); }
  ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                     ncclConfig_t* config) override {
    return ncclCommInitRankConfig(comm, nranks, id, rank, config);
  }
  ncclResult_t comm_split(ncclComm_t comm, int color, int key, ncclComm_t* out,
                          ncclConfig_t* config) override {
    return ncclCommSplit(comm, color, key, out, config);
  }
  ncclResult_t comm_get_async_error(ncclComm_t comm, ncclResult_t* state) override {
    return ncclCommGetAsyncError(comm, state);
  }
  ncclResult_t comm_finalize(ncclComm_t comm) override { return ncclCommFinalize(comm); }
  ncclResult_t comm_destroy(ncclComm_t comm) override { return ncclCommDestroy(comm); }
  ncclResult_t comm_abort(ncclComm_t comm) override { return ncclCommAbort(comm); }
  ncclResult_t comm_user_rank(ncclComm_t comm, int* rank) override {
    return ncclCommUserRank(comm, rank);
  }
  ncclResult_t comm_count(ncclComm_t comm, int* count) override {
    return ncclCommCount(comm, count);
  }
  ncclResult_t group_start() override { return ncclGroupStart(); }
  ncclResult_t group_end() override { return ncclGroupEnd(); }
  ncclResult_t all_reduce(const void* in, void* out, size_t count, ncclDataType_t type,
                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return ncclAllReduce(in, out, count, type, op, comm, stream);
  }
  ncclResult_t broadcast(const void* in, void* out, size_t count, ncclDataType_t type, int root,
                         ncclComm_t comm, cudaStream_t stream) override {
    return ncclBroadcast(in, out, count, type, root, comm, stream);
  }
  ncclResult_t reduce_scatter(const void* in, void* out, size_t recv_count, ncclDataType_t type,
                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return ncclReduceScatter(in, out, recv_count, type, op, comm, stream);
  }
  ncclResult_t all_gather(const void* in, void* out, size_t send_count, ncclDataType_t type,
                          ncclComm_t comm, cudaStream_t stream) override {
    return ncclAllGather(in, out, send_count, type, comm, stream);
  }
  ncclResult_t send(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return ncclSend(buf, count, type, peer, comm, stream);
  }
  ncclResult_t recv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return ncclRecv(buf, count, type, peer, comm, stream);
  }
  ncclResult_t mem_alloc(void** ptr, size_t bytes) override { return ncclMemAlloc(ptr, bytes); }
  ncclResult_t mem_free(void* ptr) override { return ncclMemFree(ptr); }
  ncclResult_t comm_register(ncclComm_t comm, void* buf, size_t bytes, void** handle) override {
    return ncclCommRegister(comm, buf, bytes, handle);
  }
  ncclResult_t comm_deregister(ncclComm_t comm, void* handle) override {
    return ncclCommDeregister(comm, handle);
  }
  const char* error_string(ncclResult_t result) override { return ncclGetErrorString(result); }
  const char* last_error(ncclComm_t comm) override { return ncclGetLastError(comm); }
};

}  // namespace

std::shared_ptr<NcclApi> real_nccl_api() {
  static auto api = std::make_shared<RealNcclApi>();
  return api;
}

}  // namespace rtd::nccl
