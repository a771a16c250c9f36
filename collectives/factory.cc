// Backend choice in one place (STYLE.md: no #if ladders inside logic).
#include "collectives/factory.h"

#include "collectives/checked_communicator.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/mpi/mpi_communicator.h"
#include "rt_dist/error.h"
#ifdef RTD_HAVE_NCCL
#include "collectives/nccl/nccl_communicator.h"
#endif

namespace rtd {

namespace {

std::unique_ptr<Communicator> make_backend(const CommunicatorOptions& options) {
  if (options.backend == "gloo") {
    return std::make_unique<gloo_backend::GlooCommunicator>(gloo_backend::GlooOptions{
        .store = options.store,
        .name = options.name,
        .rank = options.rank,
        .size = options.size,
        .host = options.host,
        .timeout = options.timeout,
        .flight = options.flight,
    });
  }
  if (options.backend == "mpi") {
    return std::make_unique<mpi::MpiCommunicator>(mpi::MpiOptions{
        .store = options.store,
        .name = options.name,
        .rank = options.rank,
        .size = options.size,
        .timeout = options.timeout,
        .flight = options.flight,
    });
  }
#ifdef RTD_HAVE_NCCL
  if (options.backend == "nccl") {
    return std::make_unique<nccl::NcclCommunicator>(nccl::NcclOptions{
        .store = options.store,
        .name = options.name,
        .rank = options.rank,
        .size = options.size,
        .device = options.device,
        .timeout = options.timeout,
        .flight = options.flight,
        .settings = options.nccl,
    });
  }
  const char* built = "gloo, mpi, nccl";
#else
  const char* built = "gloo, mpi";
#endif
  throw Error(ErrorCategory::kConfig, "communicator backend '" + options.backend +
                                          "' is not built into this librt_dist (built: " + built +
                                          ")");
}

}  // namespace

std::unique_ptr<Communicator> make_communicator(const CommunicatorOptions& options) {
  auto comm = make_backend(options);
  if (!options.check_collectives) return comm;
  return std::make_unique<CheckedCommunicator>(std::move(comm), options.store, options.timeout);
}

int usable_gpu_count(std::string* why) {
#ifdef RTD_HAVE_NCCL
  int count = 0;
  cudaError_t rc = nccl::real_cuda_api()->get_device_count(&count);
  if (rc != cudaSuccess) {
    if (why) *why = std::string("no CUDA device: ") + nccl::real_cuda_api()->error_string(rc);
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device is visible";
  return count;
#else
  if (why) *why = "librt_dist was built without CUDA/NCCL (RTD_WITH_CUDA=OFF or no toolkit)";
  return 0;
#endif
}

}  // namespace rtd
