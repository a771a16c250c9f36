// GrpcStore: the Store client of dtrun's gRPC store service. Every call carries
// the job token and a deadline; waits that the server holds get a deadline that
// covers them.
#include "runtime/core/store/grpc_store.h"

#include <grpcpp/grpcpp.h>

#include "rendezvous.grpc.pb.h"
#include "rt_dist/store.h"
#include "runtime/core/store/grpc_status.h"

namespace rtd {
namespace {

constexpr std::chrono::seconds kCallTimeout{60};
constexpr std::chrono::seconds kWaitSlack{10};

class GrpcStore : public Store {
 public:
  GrpcStore(const std::string& address, const std::string& token, const std::string& agent_secret,
            const TlsFiles& tls)
      : address_(address),
        token_(token),
        agent_secret_(agent_secret),
        stub_(proto::Store::NewStub(grpc::CreateChannel(address, channel_credentials(tls)))) {}
  // A view sharing `other`'s channel whose calls give up after `limit`.
  GrpcStore(const GrpcStore& other, std::chrono::milliseconds limit)
      : address_(other.address_),
        token_(other.token_),
        agent_secret_(other.agent_secret_),
        stub_(other.stub_),
        call_timeout_(limit),
        wait_slack_(limit) {}

  void set(const std::string& key, const std::string& value) override {
    proto::SetRequest req;
    req.set_key(key);
    req.set_value(value);
    proto::SetResponse resp;
    call("store set '" + key + "'", call_timeout_,
         [&](grpc::ClientContext* ctx) { return stub_->Set(ctx, req, &resp); });
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    proto::GetRequest req;
    req.set_key(key);
    req.set_timeout_ms(timeout.count());
    proto::GetResponse resp;
    call("store get '" + key + "'", timeout + wait_slack_,
         [&](grpc::ClientContext* ctx) { return stub_->Get(ctx, req, &resp); });
    return resp.value();
  }

  std::optional<std::string> try_get(const std::string& key) override {
    if (!check({key})) return std::nullopt;
    return get(key, std::chrono::milliseconds(0));
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    proto::AddRequest req;
    req.set_key(key);
    req.set_delta(delta);
    proto::AddResponse resp;
    call("store add '" + key + "'", call_timeout_,
         [&](grpc::ClientContext* ctx) { return stub_->Add(ctx, req, &resp); });
    return resp.value();
  }

  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    proto::CompareSetRequest req;
    req.set_key(key);
    req.set_expected(expected);
    req.set_desired(desired);
    proto::CompareSetResponse resp;
    call("store compare_set '" + key + "'", call_timeout_,
         [&](grpc::ClientContext* ctx) { return stub_->CompareSet(ctx, req, &resp); });
    return resp.value();
  }

  bool remove(const std::string& key) override {
    proto::DeleteRequest req;
    req.set_key(key);
    proto::DeleteResponse resp;
    call("store delete '" + key + "'", call_timeout_,
         [&](grpc::ClientContext* ctx) { return stub_->Delete(ctx, req, &resp); });
    return resp.deleted();
  }

  bool check(const std::vector<std::string>& keys) override {
    proto::CheckRequest req;
    for (const auto& key : keys) req.add_keys(key);
    proto::CheckResponse resp;
    call("store check", call_timeout_,
         [&](grpc::ClientContext* ctx) { return stub_->Check(ctx, req, &resp); });
    return resp.all_present();
  }

  std::shared_ptr<Store> bounded(std::chrono::milliseconds limit) override {
    return std::make_shared<GrpcStore>(*this, limit);
  }

 private:
  template <typename Fn>
  void call(const std::string& what, std::chrono::milliseconds deadline, Fn&& fn) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, token_);
    if (!agent_secret_.empty()) ctx.AddMetadata(kAgentMetadataKey, agent_secret_);
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    grpc::Status status = fn(&ctx);
    if (!status.ok()) throw error_from_grpc(status, what, address_);
  }

  std::string address_;
  std::string token_;
  std::string agent_secret_;
  std::shared_ptr<proto::Store::Stub> stub_;
  std::chrono::milliseconds call_timeout_ = kCallTimeout;
  std::chrono::milliseconds wait_slack_ = kWaitSlack;
};

}  // namespace

std::shared_ptr<Store> make_grpc_store(const std::string& address, const std::string& token,
                                       const std::string& agent_secret, const TlsFiles& tls) {
  return std::make_shared<GrpcStore>(address, token, agent_secret, tls);
}

std::shared_ptr<Store> make_grpc_store(const std::string& address, const std::string& token,
                                       const std::string& agent_secret) {
  return make_grpc_store(address, token, agent_secret, TlsFiles{});
}

}  // namespace rtd
