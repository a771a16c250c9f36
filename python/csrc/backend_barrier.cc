// BackendRTD's barriers.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <utility>

#include "backend.h"
#include "backend_ops.h"
#include "errors.h"
#include "tensor_bytes.h"

namespace rtd_torch {

using c10d::OpType;
using c10d::ReduceOp;

// -- barriers -------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> BackendRTD::barrier(const c10d::BarrierOptions& opts) {
  const char* what = "barrier";
  int gpu = -1;
  if (opts.device.has_value()) {
    gpu = opts.device->is_cuda() ? opts.device->index() : -1;
  } else if (!opts.device_ids.empty()) {
    gpu = static_cast<int>(opts.device_ids[0]);
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    gpu = cuda_ ? cuda_->device() : -1;
  }
  if (gpu < 0) {
    Finish finish;
    finish.blocking = true;
    return launch(at::Device(at::kCPU), OpType::BARRIER, what, std::move(finish),
                  [](rtd_comm* comm, void*) { return rtd_barrier(comm, nullptr); });
  }
  // On the GPU: an all-reduce ordered after the caller's work, whose wait()
  // blocks the host until it (and so that work) is done.
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
  at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
  Finish finish;
  finish.blocking = true;
  finish.keep = {one};
  void* p = ptr(one);
  return launch(device, OpType::BARRIER, what, std::move(finish),
                [=](rtd_comm* comm, void* stream) {
                  return rtd_all_reduce(comm, p, p, 1, RTD_INT32, RTD_SUM, gpu, stream);
                });
}

void BackendRTD::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  uint64_t round;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    round = ++monitored_rounds_;
    timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
  }
  const std::string base = "rtd/monitored/" + std::to_string(round) + "/";
  const std::string done = base + "done";
  if (getRank() != 0) {
    store_->set(base + std::to_string(getRank()), std::vector<uint8_t>{1});
    try {
      store_->wait({done}, timeout);
    } catch (const std::exception&) {
      raise_failure(where("monitored_barrier"),
                    "rank 0 did not pass the barrier within " + std::to_string(timeout.count()) +
                        " ms (a rank failed to reach it; rank 0 names which)");
    }
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < getSize(); ++r) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      store_->wait({base + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      missing.push_back(r);
      if (!wait_all_ranks) {
        break;
      }
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    raise_failure(where("monitored_barrier"), std::string("[Rank 0]: Rank") +
                                                  (missing.size() > 1 ? "s " : " ") + ranks +
                                                  " failed to pass monitoredBarrier in " +
                                                  std::to_string(timeout.count()) + " ms");
  }
  store_->set(done, std::vector<uint8_t>{1});
}

}  // namespace rtd_torch
