// StoreService: the token check and the Store calls over a MemoryStore, with
// waiting Gets held as entries, not threads (store_service.h).
#include "runtime/core/store/store_service.h"

#include <malloc.h>

#include <vector>

#include "runtime/core/store/grpc_status.h"

namespace rtd {
namespace {

constexpr std::chrono::milliseconds kTick{50};

long long ms_since(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               since)
      .count();
}

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

std::string shown(const std::string& key) {
  return "'" + key.substr(0, 64) + (key.size() > 64 ? "...'" : "'");
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
    : token_(std::move(token)), limits_(limits), store_(limits.store) {
  store_.set_observer([this](const std::string& key) {
    wake(key);
    if (observer_) observer_(key);
  });
  ticker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, kTick, [this] { return stopping_; })) {
      lock.unlock();
      expire();
      lock.lock();
    }
  });
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
                      "store: a key of " + std::to_string(key.size()) + " bytes (" + shown(key) +
                          "), more than the " + std::to_string(limits_.store.max_key_bytes) +
                          " a key may have");
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
                                    "store: key " + shown(req->key()) + " is not set"));
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  {
    Waiter waiter{ctx, reactor, resp, req->key(), peer_host(ctx->peer()), now, now + wait};
    std::lock_guard<std::mutex> lock(mu_);
    status = admit_waiter_locked(waiter);
    if (status.ok()) {
      waiter_bytes_ += waiter.weight();
      ++by_peer_[waiter.peer];
      waiters_.emplace(req->key(), std::move(waiter));
    }
  }
  if (!status.ok()) {
    reactor->Finish(status);
    return reactor;
  }
  // A write between try_get and the entry found no waiter: look again.
  if (store_.try_get(req->key())) wake(req->key());
  return reactor;
}

grpc::Status StoreService::admit_waiter_locked(const Waiter& w) const {
  if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the store is shutting down");
  auto exhausted = [](const std::string& why) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "store: " + why + "; retry, or wait for fewer keys at once");
  };
  if (waiters_.size() >= limits_.max_waiters)
    return exhausted(std::to_string(waiters_.size()) +
                     " calls already wait for keys, the most the store holds");
  if (waiter_bytes_ + w.weight() > limits_.max_waiter_bytes)
    return exhausted("the calls waiting for keys already hold " + std::to_string(waiter_bytes_) +
                     " bytes, the most the store gives them");
  const auto it = by_peer_.find(w.peer);
  if (it != by_peer_.end() && it->second >= limits_.max_waiters_per_peer)
    return exhausted(std::to_string(it->second) + " calls from " + w.peer +
                     " already wait for keys, the most one host may have waiting");
  return grpc::Status::OK;
}

void StoreService::forget_waiter_locked(const Waiter& w) {
  waiter_bytes_ -= w.weight();
  auto it = by_peer_.find(w.peer);
  if (it != by_peer_.end() && --it->second == 0) by_peer_.erase(it);
}

void StoreService::trim_after(std::size_t released) {
  // Thousands of cancelled waits leave their memory in malloc's free lists.
  if (released >= 1024) malloc_trim(0);
}

void StoreService::wake(const std::string& key) {
  std::vector<Waiter> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [first, last] = waiters_.equal_range(key);
    for (auto it = first; it != last; ++it) {
      forget_waiter_locked(it->second);
      ready.push_back(it->second);
    }
    waiters_.erase(first, last);
  }
  if (ready.empty()) return;
  auto value = store_.try_get(key);
  for (Waiter& w : ready) {
    if (value) {
      w.response->set_value(*value);
      w.reactor->Finish(grpc::Status::OK);
    } else {
      // Deleted again at once: the wait is over all the same, said as it is.
      w.reactor->Finish(grpc::Status(grpc::StatusCode::ABORTED,
                                     "store: key " + shown(key) + " was deleted while waited for"));
    }
  }
}

void StoreService::expire() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Waiter> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.until <= now || it->second.ctx->IsCancelled()) {
        forget_waiter_locked(it->second);
        due.push_back(it->second);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Waiter& w : due) {
    w.reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                   "store: key " + shown(w.key) + " did not appear within " +
                                       std::to_string(ms_since(w.since)) + " ms"));
  }
  const std::size_t released = due.size();
  due.clear();
  trim_after(released);
}

void StoreService::cancel_waits() {
  std::multimap<std::string, Waiter> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    all.swap(waiters_);
    waiter_bytes_ = 0;
    by_peer_.clear();
  }
  cv_.notify_all();
  for (auto& [key, w] : all)
    w.reactor->Finish(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "the store is shutting down (the job ended)"));
}

std::size_t StoreService::waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.size();
}

}  // namespace rtd
