// The agent's Join call: connect with gRPC's own backoff until the deadline,
// then one Join that the server holds until the round closes.
#include "launcher/rendezvous_client.h"

#include <grpcpp/grpcpp.h>

#include "launcher/net.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/store/grpc_status.h"

namespace rtd::launcher {

proto::JoinResponse join_rendezvous(const std::string& address, const std::string& token,
                                    const proto::JoinRequest& request,
                                    std::chrono::seconds timeout) {
  auto deadline = std::chrono::system_clock::now() + timeout;
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(deadline)) {
    const auto colon = address.rfind(':');
    std::string ip = address.substr(0, colon);
    if (ip.size() > 2 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
    if (accepts_tcp(ip, std::stoi(address.substr(colon + 1)), 2000)) {
      throw Error(ErrorCategory::kConfig,
                  "something at " + address +
                      " accepts connections but does not answer as a dtrun rendezvous (gRPC); "
                      "another program holds that port: pick another port in --rdzv");
    }
    throw Error(ErrorCategory::kUnavailable,
                "could not reach the rendezvous at " + address + " within " +
                    std::to_string(timeout.count()) +
                    " s (--rdzv-timeout); check that node rank 0's dtrun is running, that "
                    "--rdzv names its address, and that the port is not blocked");
  }
  auto stub = proto::Rendezvous::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, token);
  ctx.set_deadline(deadline);
  proto::JoinResponse response;
  grpc::Status status = stub->Join(&ctx, request, &response);
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        status.error_message().empty()) {
      throw Error(ErrorCategory::kTimeout, "rendezvous at " + address +
                                               ": not every node joined within " +
                                               std::to_string(timeout.count()) + " s");
    }
    throw error_from_grpc(status, "joining the rendezvous", address);
  }
  return response;
}

}  // namespace rtd::launcher
