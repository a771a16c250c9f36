// The agent's Join call: connect with gRPC's own backoff until the deadline,
// then one Join that the server holds until the round closes.
#include "launcher/rendezvous_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "launcher/net.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/grpc_status.h"
#include "runtime/core/store/tls.h"

namespace rtd::launcher {
namespace {
constexpr std::chrono::seconds kProbeEvery{2};

// What a port that takes connections but never completes the call means.
std::string no_answer(const std::string& address, const TlsFiles& tls) {
  if (tls.enabled())
    return "something at " + address +
           " accepts connections, but the TLS handshake with it fails: check that --tls-ca "
           "signed the host's certificate and this node's, that the host's certificate names "
           "the --rdzv host, and that the host runs with --tls-* too; or another program "
           "holds that port";
  return "something at " + address +
         " accepts connections but does not answer as a dtrun rendezvous (gRPC): another "
         "program may hold that port, or the host requires TLS (give --tls-cert, --tls-key "
         "and --tls-ca)";
}
}  // namespace

proto::JoinResponse join_rendezvous(const std::string& address, const std::string& token,
                                    const proto::JoinRequest& request, std::chrono::seconds timeout,
                                    const TlsFiles& tls, std::chrono::seconds connect_timeout) {
  auto deadline = std::chrono::system_clock::now() + timeout;
  const auto connect_deadline = connect_timeout.count() > 0 && connect_timeout < timeout
                                    ? std::chrono::system_clock::now() + connect_timeout
                                    : deadline;
  // Reconnect within seconds once the host comes up (gRPC's own backoff
  // grows to two minutes).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  auto channel = grpc::CreateCustomChannel(address, channel_credentials(tls), args);
  const auto colon = address.rfind(':');
  std::string ip = address.substr(0, colon);
  if (ip.size() > 2 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
  const int port = std::stoi(address.substr(colon + 1));
  bool connected = false, warned = false;
  while (!(connected = channel->WaitForConnected(
               std::min(connect_deadline, std::chrono::system_clock::now() + kProbeEvery)))) {
    if (std::chrono::system_clock::now() >= connect_deadline) break;
    // Something that takes the connection but does not speak gRPC (an HTTP
    // server on the port): said at once; the real host may still come.
    if (!warned && accepts_tcp(ip, port, 1000)) {
      warned = true;
      log::get("launcher")
          ->warn("{}; retrying until --rdzv-timeout ({} s)", no_answer(address, tls),
                 timeout.count());
    }
  }
  if (!connected) {
    if (accepts_tcp(ip, port, 2000))
      throw Error(ErrorCategory::kConfig,
                  no_answer(address, tls) + ": pick another port in --rdzv");
    throw Error(ErrorCategory::kUnavailable,
                "could not reach the rendezvous at " + address + " within " +
                    std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                       connect_deadline - (deadline - timeout))
                                       .count()) +
                    (connect_deadline == deadline ? " s (--rdzv-timeout)" : " s") +
                    "; check that node rank 0's dtrun is running, that "
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
