// RendezvousServer: the Store service (runtime/core/store/store_service.h) and
// the Join protocol (collect nnodes agents, check they agree, hand out ranks).
#include "launcher/rendezvous_server.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "launcher/net.h"
#include "launcher/round.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/store_service.h"

namespace rtd::launcher {
namespace {

// Join through gRPC's callback API: a waiting agent holds no server thread,
// so one server can hold thousands of them (bench/rendezvous_scale). A
// thread of our own expires the joins whose deadline passed.
class RendezvousService final : public proto::Rendezvous::CallbackService {
 public:
  RendezvousService(const ServerOptions& o)
      : token_(o.token),
        round_(RoundConfig{.nnodes = o.nnodes,
                           .nproc_per_node = o.nproc_per_node,
                           .fingerprint = o.fingerprint,
                           .master_port = o.master_port,
                           .run_id = random_token().substr(0, 12)}),
        expirer_([this] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
            lock.unlock();
            round_.expire(std::chrono::system_clock::now());
            lock.lock();
          }
        }) {}
  ~RendezvousService() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    expirer_.join();
  }

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const proto::JoinRequest* req,
                                 proto::JoinResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    grpc::Status auth = check_token(ctx, token_);
    if (!auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    // Answer half a second before the caller's deadline, so that it reads our
    // explanation (who joined) rather than a bare DEADLINE_EXCEEDED.
    auto deadline = ctx->deadline() - std::chrono::milliseconds(500);
    round_.join_async(*req, deadline,
                      [reactor, resp](const proto::JoinResponse* layout, const Error* error) {
                        if (layout) *resp = *layout;
                        reactor->Finish(layout ? grpc::Status::OK : to_status(*error));
                      });
    return reactor;
  }

  void cancel() { round_.cancel("the rendezvous host is shutting down"); }

 private:
  std::string token_;
  Round round_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread expirer_;
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
