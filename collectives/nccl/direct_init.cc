#include "collectives/nccl/direct_init.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "collectives/nccl/nccl_check.h"
#include "rt_dist/error.h"

namespace rtd::nccl {
namespace {

// What the init thread and its caller share; the thread may outlive the caller.
struct PendingInit {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // the init returned (rc, comm set)
  bool abandoned = false;  // the caller gave up waiting
  ncclResult_t rc = ncclSuccess;
  ncclComm_t comm = nullptr;
  cudaError_t device_error = cudaSuccess;  // selecting the GPU on the init thread
  std::string net_name;                    // config.netName points here
};

}  // namespace

ncclComm_t init_blocking_within(std::shared_ptr<NcclApi> nccl, std::shared_ptr<CudaApi> cuda,
                                int device, int nranks, const ncclUniqueId& id, int rank,
                                ncclConfig_t config, std::chrono::steady_clock::time_point deadline,
                                std::chrono::milliseconds timeout, const std::string& what) {
  auto pending = std::make_shared<PendingInit>();
  if (config.netName != nullptr) {
    pending->net_name = config.netName;
    config.netName = pending->net_name.c_str();
  }
  config.blocking = 1;
  std::thread([pending, nccl, cuda, device, nranks, id, rank, config]() mutable {
    ncclComm_t comm = nullptr;
    ncclResult_t rc = ncclInvalidUsage;
    const cudaError_t selected = cuda->set_device(device);
    if (selected == cudaSuccess) {
      rc = nccl->comm_init_rank_config(&comm, nranks, id, rank, &config);
    }
    std::unique_lock<std::mutex> lock(pending->mu);
    pending->device_error = selected;
    if (pending->abandoned) {
      lock.unlock();
      if (comm != nullptr) nccl->comm_abort(comm);
      return;
    }
    pending->rc = rc;
    pending->comm = comm;
    pending->done = true;
    pending->cv.notify_all();
  }).detach();

  std::unique_lock<std::mutex> lock(pending->mu);
  if (!pending->cv.wait_until(lock, deadline, [&] { return pending->done; })) {
    pending->abandoned = true;
    throw Error(ErrorCategory::kTimeout,
                what + " did not complete within " + std::to_string(timeout.count()) +
                    " ms; a peer may be missing or stuck (its blocking NCCL init is left to "
                    "finish on its own thread)");
  }
  if (pending->device_error != cudaSuccess) {
    throw Error(ErrorCategory::kBackend,
                what + ": selecting GPU " + std::to_string(device) +
                    " on the init thread: " + cuda->error_string(pending->device_error));
  }
  if (pending->rc != ncclSuccess) {
    Error error = nccl_error(*nccl, pending->comm, pending->rc, what);
    if (pending->comm != nullptr) nccl->comm_abort(pending->comm);
    throw error;
  }
  if (pending->comm == nullptr) {
    throw Error(ErrorCategory::kBackend,
                what + ": ncclCommInitRankConfig returned no communicator");
  }
  return pending->comm;
}

}  // namespace rtd::nccl
