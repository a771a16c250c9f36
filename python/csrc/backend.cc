#include "backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

#include "backend_ops.h"
#include "device_streams.h"
#include "errors.h"
#include "tensor_bytes.h"

namespace rtd_torch {

using c10d::OpType;
using c10d::ReduceOp;

BackendRTD::BackendRTD(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                       std::chrono::milliseconds timeout, BackendConfig config)
    : c10d::Backend(rank, size),
      store_(std::move(store)),
      timeout_(timeout.count() > 0 ? timeout : std::chrono::milliseconds(1800000)),
      config_(config) {}

BackendRTD::~BackendRTD() { shutdown(); }

void BackendRTD::setTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = timeout;  // for the communicators made from now on
}

void BackendRTD::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* comm : {&cpu_, &cuda_}) {
    if (*comm) {
      (*comm)->abort();
    }
  }
}

void BackendRTD::check(const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* comm : {&cpu_, &cuda_}) {
    if (*comm) {
      (*comm)->check(where(what));
    }
  }
}

void BackendRTD::shutdown() {
  std::shared_ptr<Comm> cpu, cuda;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cpu = std::move(cpu_);
    cuda = std::move(cuda_);
  }
  // Freed here unless a Work still holds one.
}

std::string BackendRTD::where(const char* what) const {
  return std::string("rtd ") + what + " on rank " + std::to_string(getRank()) + " of " +
         std::to_string(getSize());
}

at::Device BackendRTD::device_of(const std::vector<at::Tensor>& tensors, const char* what) const {
  TORCH_CHECK_VALUE(!tensors.empty(), where(what), ": no tensors");
  const at::Device device = tensors[0].device();
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK_VALUE(t.device() == device, where(what), ": tensors on ", device, " and ",
                      t.device(), "; every tensor must be on one device");
  }
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda(), where(what), ": tensors on ", device,
                    " are not supported (cpu, cuda)");
  return device;
}

std::shared_ptr<Comm> BackendRTD::comm_for(const at::Device& device, const char* what) {
  std::shared_ptr<Comm>& comm = device.is_cuda() ? cuda_ : cpu_;
  if (!comm) {
    CommOptions o;
    o.cuda = device.is_cuda();
    o.device = o.cuda ? device.index() : -1;
    o.rank = getRank();
    o.size = getSize();
    o.timeout = timeout_;
    o.copy_engines = config_.copy_engines;
    o.high_priority_stream = config_.high_priority_stream;
    o.name = "rtd group of " + std::to_string(getSize()) + (o.cuda ? " cuda" : " cpu");
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        std::string("rtd/") + (o.cuda ? "cuda/" : "cpu/"), store_);
    comm = std::make_shared<Comm>(prefixed, std::move(o));
  } else if (comm->cuda() && device.index() != comm->device()) {
    C10_THROW_ERROR(ValueError, where(what) +
                                    ": this group runs on cuda:" + std::to_string(comm->device()) +
                                    ", a tensor is on " + device.str() + "; one GPU per rank");
  }
  return comm;
}

c10::intrusive_ptr<c10d::Work> BackendRTD::launch(const at::Device& device, OpType type,
                                                  const char* what, Finish finish,
                                                  const Call& call) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> comm = comm_for(device, what);
  comm->check(where(what));
  comm->reap();
  std::optional<OnDevice> on_device;  // whatever GPU the script made current
  void* stream = nullptr;
  if (comm->cuda()) {
    on_device.emplace(comm->device());
    stream = current_stream(comm->device()).native_handle();
  }
  rtd_work* handle = call ? call(comm->handle(), stream) : nullptr;  // none: nothing to move
  if (call && handle == nullptr) {
    raise_last_error(where(what));
  }
  ++calls_;
  auto work = c10::make_intrusive<WorkRTD>(std::move(comm), handle, type, what, where(what),
                                           std::move(finish));
  if (batch_) {  // for endCoalescing's Work
    batch_launched_.push_back(work);
  }
  return work;
}

}  // namespace rtd_torch
