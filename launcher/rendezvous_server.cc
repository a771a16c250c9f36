// RendezvousServer: token check, the Store service over a MemoryStore, and the
// Join protocol (collect nnodes agents, check they agree, hand out ranks).
#include "launcher/rendezvous_server.h"

#include <grpcpp/grpcpp.h>

#include "launcher/net.h"
#include "launcher/round.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/grpc_status.h"
#include "runtime/core/store/memory_store.h"

namespace rtd::launcher {
namespace {

constexpr std::chrono::milliseconds kWaitSlice{200};

grpc::Status check_token(grpc::ServerContext* ctx, const std::string& token) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the call carries no job token");
  }
  if (std::string(it->second.data(), it->second.size()) != token) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the job token does not match node rank 0's");
  }
  return grpc::Status::OK;
}

grpc::Status to_status(const Error& e) {
  switch (e.category()) {
    case ErrorCategory::kTimeout:
      return {grpc::StatusCode::DEADLINE_EXCEEDED, e.what()};
    case ErrorCategory::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
    case ErrorCategory::kConfig:
      return {grpc::StatusCode::FAILED_PRECONDITION, e.what()};
    default:
      return {grpc::StatusCode::INTERNAL, e.what()};
  }
}

// Runs body after the token check, converting rtd::Error to a status.
template <typename Fn>
grpc::Status guarded(grpc::ServerContext* ctx, const std::string& token, Fn&& body) {
  grpc::Status auth = check_token(ctx, token);
  if (!auth.ok()) return auth;
  try {
    body();
    return grpc::Status::OK;
  } catch (const Error& e) {
    return to_status(e);
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

class StoreService final : public proto::Store::Service {
 public:
  explicit StoreService(std::string token) : token_(std::move(token)) {}

  grpc::Status Set(grpc::ServerContext* ctx, const proto::SetRequest* req,
                   proto::SetResponse*) override {
    return guarded(ctx, token_, [&] { store_.set(req->key(), req->value()); });
  }
  grpc::Status Get(grpc::ServerContext* ctx, const proto::GetRequest* req,
                   proto::GetResponse* resp) override {
    // Waits in slices so that a cancelled call or a shutdown never leaves a handler blocked.
    return guarded(ctx, token_, [&] {
      auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(req->timeout_ms());
      for (;;) {
        if (auto value = store_.try_get(req->key())) {
          resp->set_value(*value);
          return;
        }
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || ctx->IsCancelled()) {
          store_.get(req->key(), std::chrono::milliseconds(0));  // throws the timeout error
        }
        try {
          resp->set_value(store_.get(req->key(), std::min(left, kWaitSlice)));
          return;
        } catch (const Error& e) {
          if (e.category() != ErrorCategory::kTimeout) throw;
        }
      }
    });
  }
  grpc::Status Add(grpc::ServerContext* ctx, const proto::AddRequest* req,
                   proto::AddResponse* resp) override {
    return guarded(ctx, token_, [&] { resp->set_value(store_.add(req->key(), req->delta())); });
  }
  grpc::Status CompareSet(grpc::ServerContext* ctx, const proto::CompareSetRequest* req,
                          proto::CompareSetResponse* resp) override {
    return guarded(ctx, token_, [&] {
      resp->set_value(store_.compare_set(req->key(), req->expected(), req->desired()));
    });
  }
  grpc::Status Delete(grpc::ServerContext* ctx, const proto::DeleteRequest* req,
                      proto::DeleteResponse* resp) override {
    return guarded(ctx, token_, [&] { resp->set_deleted(store_.remove(req->key())); });
  }
  grpc::Status Check(grpc::ServerContext* ctx, const proto::CheckRequest* req,
                     proto::CheckResponse* resp) override {
    return guarded(ctx, token_, [&] {
      std::vector<std::string> keys(req->keys().begin(), req->keys().end());
      resp->set_all_present(store_.check(keys));
    });
  }

 private:
  std::string token_;
  MemoryStore store_;
};

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
