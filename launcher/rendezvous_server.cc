// RendezvousServer: the Store service (runtime/core/store/store_service.h) and
// the Join protocol (collect nnodes agents, check they agree, hand out ranks).
#include "launcher/rendezvous_server.h"

#include <grpcpp/grpcpp.h>

#include "launcher/net.h"
#include "launcher/round.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/store_service.h"

namespace rtd::launcher {
namespace {

class RendezvousService final : public proto::Rendezvous::Service {
 public:
  RendezvousService(const ServerOptions& o)
      : token_(o.token),
        round_(RoundConfig{.nnodes = o.nnodes,
                           .nproc_per_node = o.nproc_per_node,
                           .fingerprint = o.fingerprint,
                           .master_port = o.master_port,
                           .run_id = random_token().substr(0, 12)}) {}

  grpc::Status Join(grpc::ServerContext* ctx, const proto::JoinRequest* req,
                    proto::JoinResponse* resp) override {
    return guarded(ctx, token_, [&] {
      // Answer half a second before the caller's deadline, so that it reads our
      // explanation (who joined) rather than a bare DEADLINE_EXCEEDED.
      auto deadline = ctx->deadline() - std::chrono::milliseconds(500);
      *resp = round_.join(*req, deadline);
    });
  }

  void cancel() { round_.cancel("the rendezvous host is shutting down"); }

 private:
  std::string token_;
  Round round_;
};

}  // namespace

struct RendezvousServer::Impl {
  std::unique_ptr<StoreService> store;
  std::unique_ptr<RendezvousService> rendezvous;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

RendezvousServer::RendezvousServer(const ServerOptions& o) : impl_(std::make_unique<Impl>()) {
  if (o.port != 0) check_bindable(o.bind_ip, o.port);
  impl_->store = std::make_unique<StoreService>(o.token);
  impl_->rendezvous = std::make_unique<RendezvousService>(o);
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(join_host_port(o.bind_ip, o.port), grpc::InsecureServerCredentials(),
                           &impl_->port);
  builder.RegisterService(impl_->store.get());
  builder.RegisterService(impl_->rendezvous.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0) {
    // Another process may have taken the port since the check above: say so.
    if (o.port != 0) check_bindable(o.bind_ip, o.port);
    throw Error(ErrorCategory::kConfig, "cannot host the rendezvous on " +
                                            join_host_port(o.bind_ip, o.port) +
                                            ": gRPC could not listen there");
  }
  log::get("rendezvous")
      ->info("rendezvous and store listening on {}", join_host_port(o.bind_ip, impl_->port));
}

RendezvousServer::~RendezvousServer() { shutdown(); }

int RendezvousServer::port() const { return impl_->port; }

void RendezvousServer::shutdown() {
  if (!impl_->server) return;
  impl_->rendezvous->cancel();
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace rtd::launcher
