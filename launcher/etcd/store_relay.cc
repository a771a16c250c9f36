// The job's store served to this node's workers from elsewhere (store_relay.h).
#include "launcher/etcd/store_relay.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "launcher/etcd/etcd_store.h"
#include "launcher/net.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/store/store_service.h"
#include "runtime/core/store/tls.h"
#include "runtime/core/store/tls_door.h"

namespace rtd::launcher {
namespace {

// What one call may carry: etcd refuses requests over 1.5 MiB by default.
constexpr std::size_t kMaxKeyBytes = 4096;
constexpr std::size_t kMaxValueBytes = 1u << 20;
constexpr std::size_t kMaxCheckKeys = 4096;
constexpr std::chrono::hours kMaxWait{24};
constexpr std::chrono::milliseconds kWaitSlice{1000};

grpc::Status too_large(const char* what, std::size_t bytes, std::size_t limit) {
  return {grpc::StatusCode::INVALID_ARGUMENT,
          std::string("store: a ") + what + " of " + std::to_string(bytes) +
              " bytes is over the job's store limit of " + std::to_string(limit) +
              " bytes with the etcd backend"};
}

constexpr std::chrono::milliseconds kRetryPause{200};

class RelayService final : public proto::Store::Service {
 public:
  RelayService(std::shared_ptr<Store> store, std::string token, StoreRelay::LeaseLost lease_lost)
      : store_(std::move(store)), token_(std::move(token)), lease_lost_(std::move(lease_lost)) {}

  grpc::Status Set(grpc::ServerContext* ctx, const proto::SetRequest* req,
                   proto::SetResponse*) override {
    if (auto s = admit(ctx, req->key()); !s.ok()) return s;
    if (req->value().size() > kMaxValueBytes)
      return too_large("value", req->value().size(), kMaxValueBytes);
    return status_of([&] { ride_out(ctx, [&] { store_->set(req->key(), req->value()); }); });
  }

  grpc::Status Get(grpc::ServerContext* ctx, const proto::GetRequest* req,
                   proto::GetResponse* resp) override {
    if (auto s = admit(ctx, req->key()); !s.ok()) return s;
    if (waiting_.fetch_add(1) >= StoreRelay::kMaxWaiting) {
      waiting_.fetch_sub(1);
      return {grpc::StatusCode::RESOURCE_EXHAUSTED,
              "store: " + std::to_string(StoreRelay::kMaxWaiting) +
                  " gets already wait on this node's store"};
    }
    const auto timeout = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(std::max<std::int64_t>(0, req->timeout_ms())), kMaxWait);
    grpc::Status s = status_of([&] { resp->set_value(wait_for(ctx, req->key(), timeout)); });
    waiting_.fetch_sub(1);
    return s;
  }

  // The server shuts down: waiting gets end within a slice.
  void stop() { stopping_ = true; }

  grpc::Status Add(grpc::ServerContext* ctx, const proto::AddRequest* req,
                   proto::AddResponse* resp) override {
    if (auto s = admit(ctx, req->key()); !s.ok()) return s;
    // One request, however many tries ride_out makes: an add counts once.
    const std::string request = random_token();
    return status_of([&] {
      ride_out(ctx, [&] { resp->set_value(add_once(*store_, req->key(), req->delta(), request)); });
    });
  }

  grpc::Status CompareSet(grpc::ServerContext* ctx, const proto::CompareSetRequest* req,
                          proto::CompareSetResponse* resp) override {
    if (auto s = admit(ctx, req->key()); !s.ok()) return s;
    if (req->desired().size() > kMaxValueBytes)
      return too_large("value", req->desired().size(), kMaxValueBytes);
    return status_of([&] {
      ride_out(ctx, [&] {
        resp->set_value(store_->compare_set(req->key(), req->expected(), req->desired()));
      });
    });
  }

  grpc::Status Delete(grpc::ServerContext* ctx, const proto::DeleteRequest* req,
                      proto::DeleteResponse* resp) override {
    if (auto s = admit(ctx, req->key()); !s.ok()) return s;
    return status_of(
        [&] { ride_out(ctx, [&] { resp->set_deleted(store_->remove(req->key())); }); });
  }

  grpc::Status Check(grpc::ServerContext* ctx, const proto::CheckRequest* req,
                     proto::CheckResponse* resp) override {
    if (auto s = check_token(ctx, token_); !s.ok()) return s;
    if (static_cast<std::size_t>(req->keys_size()) > kMaxCheckKeys)
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "store: a check of " + std::to_string(req->keys_size()) + " keys (at most " +
                  std::to_string(kMaxCheckKeys) + ")"};
    std::vector<std::string> keys;
    for (const std::string& key : req->keys()) {
      if (key.empty() || key.size() > kMaxKeyBytes)
        return too_large("key", key.size(), kMaxKeyBytes);
      keys.push_back(key);
    }
    return status_of([&] { ride_out(ctx, [&] { resp->set_all_present(store_->check(keys)); }); });
  }

 private:
  grpc::Status admit(grpc::ServerContext* ctx, const std::string& key) {
    if (auto s = check_token(ctx, token_); !s.ok()) return s;
    if (key.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "store: an empty key"};
    if (key.size() > kMaxKeyBytes) return too_large("key", key.size(), kMaxKeyBytes);
    return grpc::Status::OK;
  }

  // The key's value once it exists, waited for in slices so that a caller
  // that gives up, or the server's end, frees the thread within one.
  std::string wait_for(grpc::ServerContext* ctx, const std::string& key,
                       std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      try {
        std::string value;
        ride_out(ctx, [&] {
          value = store_->get(key, std::clamp(left, std::chrono::milliseconds(0), kWaitSlice));
        });
        return value;
      } catch (const Error& e) {
        if (e.category() != ErrorCategory::kTimeout || left <= kWaitSlice) throw;
      }
      if (ctx->IsCancelled() || stopping_)
        throw Error(ErrorCategory::kTimeout,
                    "store: the wait for key '" + key.substr(0, 64) + "' was cancelled");
    }
  }

  // Runs call; while it finds etcd unavailable and this node's lease holds,
  // again (a pause, a leader election); once the lease is lost, fails saying so.
  template <typename Call>
  void ride_out(grpc::ServerContext* ctx, Call&& call) {
    for (;;) {
      try {
        call();
        return;
      } catch (const Error& e) {
        if (e.category() != ErrorCategory::kUnavailable || !lease_lost_) throw;
        if (std::string why = lease_lost_(); !why.empty())
          throw Error(ErrorCategory::kUnavailable,
                      std::string("this node lost its lease in etcd: ") + why +
                          " (last: " + e.what() + ")");
        if (ctx->IsCancelled() || stopping_) throw;
      }
      std::this_thread::sleep_for(kRetryPause);
    }
  }

  std::shared_ptr<Store> store_;
  const std::string token_;
  const StoreRelay::LeaseLost lease_lost_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace

struct StoreRelay::Impl {
  std::unique_ptr<RelayService> service;
  std::unique_ptr<TlsDoor> door;  // with TLS: names the peers it refuses
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

StoreRelay::StoreRelay(const std::string& bind_ip, std::shared_ptr<Store> store,
                       const std::string& token, const TlsFiles& tls, LeaseLost lease_lost)
    : impl_(std::make_unique<Impl>()) {
  impl_->service = std::make_unique<RelayService>(std::move(store), token, std::move(lease_lost));
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("dtrun-store-relay");
  quota.SetMaxThreads(kMaxWaiting + 64);  // the waiting gets, and room for the other calls
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxControlMessageBytes);
  const std::string address = join_host_port(bind_ip, 0);
  impl_->door = add_control_port(builder, bind_ip, 0, tls, "store relay", &impl_->port);
  builder.RegisterService(impl_->service.get());
  impl_->server = builder.BuildAndStart();
  if (impl_->server && impl_->door) impl_->door->open();
  if (!impl_->server || impl_->port == 0)
    throw Error(ErrorCategory::kConfig, "cannot serve the job's store to this node's workers on " +
                                            address + ": gRPC could not listen there");
}

StoreRelay::~StoreRelay() {
  if (!impl_->server) return;
  // Waiting gets end with the server (their workers are gone or going).
  impl_->service->stop();
  if (impl_->door) impl_->door->close();
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
}

int StoreRelay::port() const { return impl_->port; }

}  // namespace rtd::launcher
