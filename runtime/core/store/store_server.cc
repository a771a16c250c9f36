// StoreServer: one StoreService on one listening port.
#include "runtime/core/store/store_server.h"

#include <grpcpp/grpcpp.h>

#include "rt_dist/error.h"
#include "runtime/core/store/store_service.h"

namespace rtd {

struct StoreServer::Impl {
  std::unique_ptr<StoreService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

StoreServer::StoreServer(const std::string& bind_ip, int port, const std::string& token)
    : impl_(std::make_unique<Impl>()) {
  const std::string address =
      (bind_ip.find(':') != std::string::npos ? "[" + bind_ip + "]" : bind_ip) + ":" +
      std::to_string(port);
  impl_->service = std::make_unique<StoreService>(token);
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  bound_control_server(builder);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(impl_->service.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0) {
    throw Error(ErrorCategory::kConfig,
                "cannot host the job's store on " + address + ": gRPC could not listen there");
  }
}

StoreServer::~StoreServer() {
  if (!impl_->server) return;
  impl_->service->cancel_waits();
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
}

int StoreServer::port() const { return impl_->port; }

}  // namespace rtd
