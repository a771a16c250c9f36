// Backend choice in one place (STYLE.md: no #if ladders inside logic).
#include "collectives/factory.h"

#include "collectives/gloo/gloo_communicator.h"
#include "rt_dist/error.h"

namespace rtd {

std::unique_ptr<Communicator> make_communicator(const CommunicatorOptions& options) {
  if (options.backend == "gloo") {
    return std::make_unique<gloo_backend::GlooCommunicator>(gloo_backend::GlooOptions{
        .store = options.store,
        .rank = options.rank,
        .size = options.size,
        .host = options.host,
        .timeout = options.timeout,
    });
  }
  throw Error(ErrorCategory::kConfig, "communicator backend '" + options.backend +
                                          "' is not built into this librt_dist (built: gloo)");
}

}  // namespace rtd
