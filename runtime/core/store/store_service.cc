// StoreService: the token check and the Store calls over a MemoryStore, with
// waiting Gets held as entries, not threads (store_service.h).
#include "runtime/core/store/store_service.h"

#include <vector>

#include "runtime/core/store/grpc_status.h"
#include "runtime/core/store/tls_door.h"

namespace rtd {
namespace {

constexpr std::chrono::milliseconds kTick{50};

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// "ipv4:10.0.0.2:41234" -> "ipv4:10.0.0.2", "ipv6:[::1]:5" -> "ipv6:[::1]".
std::string peer_host(const std::string& peer) {
  const std::size_t colon = peer.rfind(':');
  if (colon == std::string::npos || peer.find(':') == colon) return peer;
  return peer.substr(0, colon);
}

}  // namespace

void bound_control_server(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kMaxControlMessageBytes);
  grpc::ResourceQuota quota("rtd-control-plane");
  quota.Resize(kControlServerMemory);
  builder.SetResourceQuota(quota);
}

grpc::Status check_token(grpc::ServerContextBase* ctx, const std::string& token) {
  note_call(*ctx);  // past the TLS handshake, if a door watches it (tls_door.h)
  if (token.empty()) return grpc::Status::OK;  // an unauthenticated job (dtrun warned)
  const auto& md = ctx->client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the call carries no job token");
  }
  if (!secrets_equal(std::string(it->second.data(), it->second.size()), token)) {
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
    case ErrorCategory::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, e.what()};
    default:
      return {grpc::StatusCode::INTERNAL, e.what()};
  }
}

StoreService::StoreService(std::string token, StoreServiceLimits limits)
    : token_(std::move(token)), limits_(limits), store_(limits.store), waiters_(limits) {
  store_.set_observer([this](const std::string& key) {
    wake(key);
    if (observer_) observer_(key);
  });
  ticker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, kTick, [this] { return stopping_; })) {
      lock.unlock();
      waiters_.expire();
      lock.lock();
    }
  });
}

void StoreService::wake(const std::string& key) {
  waiters_.wake(key, [&] { return store_.try_get(key); });
}

StoreService::~StoreService() {
  cancel_waits();
  cv_.notify_all();
  ticker_.join();
}

grpc::Status StoreService::admit_write(grpc::CallbackServerContext* ctx, const std::string& key) {
  grpc::Status status = check_token(ctx, token_);
  if (status.ok() && guard_) status = guard_(ctx, key);
  return status;
}

template <typename Fn>
grpc::ServerUnaryReactor* StoreService::write(grpc::CallbackServerContext* ctx,
                                              const std::string& key, Fn&& body) {
  // The key's size at the door, whatever the write would do: a compare_set
  // whose expected value differs stores nothing and would have passed it.
  grpc::Status status = key_refusal(key);
  if (status.ok()) status = admit_write(ctx, key);
  if (status.ok()) status = status_of(body);
  return finish(ctx, status);
}

grpc::ServerUnaryReactor* StoreService::Set(grpc::CallbackServerContext* ctx,
                                            const proto::SetRequest* req, proto::SetResponse*) {
  return write(ctx, req->key(), [&] { store_.set(req->key(), req->value()); });
}

grpc::ServerUnaryReactor* StoreService::Add(grpc::CallbackServerContext* ctx,
                                            const proto::AddRequest* req,
                                            proto::AddResponse* resp) {
  return write(ctx, req->key(), [&] { resp->set_value(store_.add(req->key(), req->delta())); });
}

grpc::ServerUnaryReactor* StoreService::CompareSet(grpc::CallbackServerContext* ctx,
                                                   const proto::CompareSetRequest* req,
                                                   proto::CompareSetResponse* resp) {
  return write(ctx, req->key(), [&] {
    resp->set_value(store_.compare_set(req->key(), req->expected(), req->desired()));
  });
}

grpc::ServerUnaryReactor* StoreService::Delete(grpc::CallbackServerContext* ctx,
                                               const proto::DeleteRequest* req,
                                               proto::DeleteResponse* resp) {
  return write(ctx, req->key(), [&] { resp->set_deleted(store_.remove(req->key())); });
}

grpc::Status StoreService::key_refusal(const std::string& key) const {
  if (key.size() <= limits_.store.max_key_bytes) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "store: a key of " + std::to_string(key.size()) + " bytes (" +
                          shown_key(key) + "), more than the " +
                          std::to_string(limits_.store.max_key_bytes) + " a key may have");
}

grpc::ServerUnaryReactor* StoreService::Check(grpc::CallbackServerContext* ctx,
                                              const proto::CheckRequest* req,
                                              proto::CheckResponse* resp) {
  grpc::Status status = check_token(ctx, token_);
  if (status.ok() && static_cast<std::size_t>(req->keys_size()) > limits_.max_check_keys) {
    status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "store check of " + std::to_string(req->keys_size()) +
                              " keys, more than the " + std::to_string(limits_.max_check_keys) +
                              " one call may name");
  }
  for (const std::string& key : req->keys()) {
    if (!status.ok()) break;
    status = key_refusal(key);
  }
  if (status.ok()) {
    status = status_of([&] {
      std::vector<std::string> keys(req->keys().begin(), req->keys().end());
      resp->set_all_present(store_.check(keys));
    });
  }
  return finish(ctx, status);
}

grpc::ServerUnaryReactor* StoreService::Get(grpc::CallbackServerContext* ctx,
                                            const proto::GetRequest* req,
                                            proto::GetResponse* resp) {
  grpc::Status status = check_token(ctx, token_);
  if (status.ok()) status = key_refusal(req->key());
  if (!status.ok()) return finish(ctx, status);
  if (auto value = store_.try_get(req->key())) {
    resp->set_value(*value);
    return finish(ctx, grpc::Status::OK);
  }
  // Negative waits are none; huge ones (that would overflow a time point)
  // are clamped.
  const long long asked = req->timeout_ms();
  const auto wait = std::chrono::milliseconds(
      std::clamp<long long>(asked, 0, static_cast<long long>(limits_.max_wait.count())));
  const auto now = std::chrono::steady_clock::now();
  if (wait.count() == 0)
    return finish(ctx, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                    "store: key " + shown_key(req->key()) + " is not set"));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  status = waiters_.admit(StoreWaiters::Entry{
      .key = req->key(),
      .peer = peer_host(ctx->peer()),
      .since = now,
      .until = now + wait,
      .cancelled = [ctx] { return ctx->IsCancelled(); },
      .answer =
          [reactor, resp](const grpc::Status& answer, const std::string* value) {
            if (value) resp->set_value(*value);
            reactor->Finish(answer);
          }});
  if (!status.ok()) {
    reactor->Finish(status);
    return reactor;
  }
  // A write between try_get and the entry found no waiter: look again.
  if (store_.try_get(req->key())) wake(req->key());
  return reactor;
}

void StoreService::cancel_waits() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  waiters_.cancel();
}

std::size_t StoreService::waiting() { return waiters_.size(); }

}  // namespace rtd
