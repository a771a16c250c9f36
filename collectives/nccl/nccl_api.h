// NcclApi: the NCCL calls the backend makes, behind an interface so that the
// bootstrap, deadline and abort logic is unit-tested with a fake and no GPU.
#pragma once

#include <nccl.h>

#include <memory>

namespace rtd::nccl {

class NcclApi {
 public:
  virtual ~NcclApi() = default;
  virtual ncclResult_t get_unique_id(ncclUniqueId* id) = 0;
  virtual ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                             int rank, ncclConfig_t* config) = 0;
  virtual ncclResult_t comm_split(ncclComm_t comm, int color, int key, ncclComm_t* out,
                                  ncclConfig_t* config) = 0;
  virtual ncclResult_t comm_get_async_error(ncclComm_t comm, ncclResult_t* state) = 0;
  virtual ncclResult_t comm_finalize(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_destroy(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_abort(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_user_rank(ncclComm_t comm, int* rank) = 0;
  virtual ncclResult_t comm_count(ncclComm_t comm, int* count) = 0;
  virtual ncclResult_t group_start() = 0;
  virtual ncclResult_t group_end() = 0;
  virtual ncclResult_t all_reduce(const void* in, void* out, size_t count, ncclDataType_t type,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t broadcast(const void* in, void* out, size_t count, ncclDataType_t type,
                                 int root, ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t reduce_scatter(const void* in, void* out, size_t recv_count,
                                      ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) = 0;
  virtual ncclResult_t all_gather(const void* in, void* out, size_t send_count, ncclDataType_t type,
                                  ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t send(const void* buf, size_t count, ncclDataType_t type, int peer,
                            ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t recv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                            cudaStream_t stream) = 0;
  // Memory NCCL can register for direct transfers (ncclMemAlloc: CUDA VMM),
  // and its registration with a communicator.
  virtual ncclResult_t mem_alloc(void** ptr, size_t bytes) = 0;
  virtual ncclResult_t mem_free(void* ptr) = 0;
  virtual ncclResult_t comm_register(ncclComm_t comm, void* buf, size_t bytes, void** handle) = 0;
  virtual ncclResult_t comm_deregister(ncclComm_t comm, void* handle) = 0;
  virtual const char* error_string(ncclResult_t result) = 0;
  virtual const char* last_error(ncclComm_t comm) = 0;
};

std::shared_ptr<NcclApi> real_nccl_api();

}  // namespace rtd::nccl
