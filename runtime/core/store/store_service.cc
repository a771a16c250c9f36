// StoreService: the token check and the Store calls over a MemoryStore.
#include "runtime/core/store/store_service.h"

#include "runtime/core/store/grpc_status.h"

namespace rtd {
namespace {
constexpr std::chrono::milliseconds kWaitSlice{200};
}  // namespace

grpc::Status check_token(grpc::ServerContextBase* ctx, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;  // an unauthenticated job (dtrun warned)
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

grpc::Status StoreService::Set(grpc::ServerContext* ctx, const proto::SetRequest* req,
                               proto::SetResponse*) {
  return guarded(ctx, token_, [&] { store_.set(req->key(), req->value()); });
}
grpc::Status StoreService::Get(grpc::ServerContext* ctx, const proto::GetRequest* req,
                               proto::GetResponse* resp) {
  // Waits in slices so that a cancelled call or a shutdown never leaves a handler blocked.
  return guarded(ctx, token_, [&] {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(req->timeout_ms());
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
grpc::Status StoreService::Add(grpc::ServerContext* ctx, const proto::AddRequest* req,
                               proto::AddResponse* resp) {
  return guarded(ctx, token_, [&] { resp->set_value(store_.add(req->key(), req->delta())); });
}
grpc::Status StoreService::CompareSet(grpc::ServerContext* ctx, const proto::CompareSetRequest* req,
                                      proto::CompareSetResponse* resp) {
  return guarded(ctx, token_, [&] {
    resp->set_value(store_.compare_set(req->key(), req->expected(), req->desired()));
  });
}
grpc::Status StoreService::Delete(grpc::ServerContext* ctx, const proto::DeleteRequest* req,
                                  proto::DeleteResponse* resp) {
  return guarded(ctx, token_, [&] { resp->set_deleted(store_.remove(req->key())); });
}
grpc::Status StoreService::Check(grpc::ServerContext* ctx, const proto::CheckRequest* req,
                                 proto::CheckResponse* resp) {
  return guarded(ctx, token_, [&] {
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    resp->set_all_present(store_.check(keys));
  });
}

}  // namespace rtd
