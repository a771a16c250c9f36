// Converts grpc::Status to rtd::Error (the one place, with grpc_store.cc and the
// rendezvous server, where gRPC status codes are read). Also the token metadata key.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "rt_dist/error.h"

namespace rtd {

inline constexpr const char* kTokenMetadataKey = "x-dtrun-token";
// An agent's secret (JoinResponse.agent_secret), on its writes of "dtrun/" keys.
inline constexpr const char* kAgentMetadataKey = "x-dtrun-agent";

// what: what was being done ("store get 'k'"); target: the server's address.
Error error_from_grpc(const grpc::Status& status, const std::string& what,
                      const std::string& target);

}  // namespace rtd
