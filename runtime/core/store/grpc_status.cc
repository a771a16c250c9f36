// grpc::Status -> rtd::Error, with a hint of what to try for each code.
#include "runtime/core/store/grpc_status.h"

namespace rtd {

Error error_from_grpc(const grpc::Status& status, const std::string& what,
                      const std::string& target) {
  std::string prefix = what + " at " + target + " failed: ";
  std::string detail = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      if (detail.find("token") == std::string::npos)
        return Error(ErrorCategory::kConfig, prefix + detail, status.error_code());
      return Error(
          ErrorCategory::kConfig,
          prefix + detail + " (every node and worker must use the same --token/DTRUN_TOKEN)",
          status.error_code());
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Error(ErrorCategory::kTimeout, prefix + "deadline exceeded: " + detail,
                   status.error_code());
    case grpc::StatusCode::UNAVAILABLE:
      // A node's relay of the store in etcd (the etcd backend) answered:
      // etcd is what cannot be reached, and its words say so.
      if (detail.rfind("etcd at ", 0) == 0)
        return Error(ErrorCategory::kUnavailable, prefix + detail, status.error_code());
      return Error(ErrorCategory::kUnavailable,
                   prefix + "server unreachable (" + detail +
                       "); check that node rank 0's dtrun is running and the port is reachable",
                   status.error_code());
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return Error(ErrorCategory::kConfig, prefix + detail, status.error_code());
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return Error(ErrorCategory::kConfig, prefix + detail, status.error_code());
    case grpc::StatusCode::UNIMPLEMENTED:
      return Error(ErrorCategory::kConfig,
                   prefix + "the server there is not a dtrun of this version (" + detail +
                       "); is another program using that port?",
                   status.error_code());
    default:
      return Error(ErrorCategory::kBackend, prefix + detail, status.error_code());
  }
}

}  // namespace rtd
