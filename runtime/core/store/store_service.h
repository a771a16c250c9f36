// The Store service of the control plane's gRPC server: every call checked
// against the job token, served from a MemoryStore. dtrun's rendezvous server
// and StoreServer (a store alone, for jobs started without dtrun) register it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/store/memory_store.h"

namespace rtd {

// OK when the call carries `token`; UNAUTHENTICATED or PERMISSION_DENIED otherwise.
grpc::Status check_token(grpc::ServerContextBase* ctx, const std::string& token);
grpc::Status to_status(const Error& e);

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
                   proto::SetResponse*) override;
  grpc::Status Get(grpc::ServerContext* ctx, const proto::GetRequest* req,
                   proto::GetResponse* resp) override;
  grpc::Status Add(grpc::ServerContext* ctx, const proto::AddRequest* req,
                   proto::AddResponse* resp) override;
  grpc::Status CompareSet(grpc::ServerContext* ctx, const proto::CompareSetRequest* req,
                          proto::CompareSetResponse* resp) override;
  grpc::Status Delete(grpc::ServerContext* ctx, const proto::DeleteRequest* req,
                      proto::DeleteResponse* resp) override;
  grpc::Status Check(grpc::ServerContext* ctx, const proto::CheckRequest* req,
                     proto::CheckResponse* resp) override;

  // The keys themselves, for a service in the same server (the rendezvous's heartbeats).
  MemoryStore& memory() { return store_; }

 private:
  std::string token_;
  MemoryStore store_;
};

}  // namespace rtd
