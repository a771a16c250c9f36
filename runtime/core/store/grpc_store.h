// The gRPC store client with the control plane's TLS (the public
// make_grpc_store in rt_dist/store.h speaks in the clear).
#pragma once

#include <memory>
#include <string>

#include "rt_dist/store.h"
#include "runtime/core/store/tls.h"

namespace rtd {

std::shared_ptr<Store> make_grpc_store(const std::string& address, const std::string& token,
                                       const std::string& agent_secret, const TlsFiles& tls);

}  // namespace rtd
