// RendezvousServer: the Store service (runtime/core/store/store_service.h) and
// the Rendezvous (rounds that collect agents, check they agree and hand out
// ranks; the members' heartbeats).
#include "launcher/rendezvous_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "launcher/membership.h"
#include "launcher/net.h"
#include "launcher/request_checks.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/grpc_status.h"
#include "runtime/core/store/store_service.h"
#include "runtime/core/store/tls.h"
#include "runtime/core/store/tls_door.h"

namespace rtd::launcher {
namespace {

// Join and Heartbeat through gRPC's callback API: a waiting agent holds no
// server thread, so one server holds thousands of them
// (bench/rendezvous_scale). A heartbeat with nothing to tell is held (up to
// its hold_ms) and answered when something happens. A thread of our own
// ticks every 100 ms: the membership (expired joins, last calls, silent
// members), then the held heartbeats that are due or have news.
// The host's log of refused calls (wrong token, malformed, a join turned
// away, a call that speaks for another node): each names the peer's address,
// at most kPerMinute a minute, then how many more were refused.
class RefusalLog {
 public:
  void note(grpc::ServerContextBase* ctx, const std::string& what, const std::string& why) {
    constexpr int kPerMinute = 20;
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    if (now - window_ > std::chrono::minutes(1)) {
      if (dropped_ > 0)
        log::get("rendezvous")->warn("{} more call(s) refused in the last minute", dropped_);
      window_ = now;
      logged_ = dropped_ = 0;
    }
    if (logged_++ >= kPerMinute) {
      ++dropped_;
      return;
    }
    log::get("rendezvous")->warn("refused {} from {}: {}", what, ctx->peer(), why);
  }

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_{};
  int logged_ = 0;
  long long dropped_ = 0;
};

class RendezvousService final : public proto::Rendezvous::CallbackService {
 public:
  // A held heartbeat is woken when one of its keys changes only for keys
  // under this prefix (the agents' own); others are answered when present.
  // Writes under it need an agent's secret (x-dtrun-agent).
  static constexpr const char* kWatchable = "dtrun/";

  RendezvousService(const ServerOptions& o, StoreService* service)
      : token_(o.token),
        store_(&service->memory()),
        membership_(RoundConfig{.min_nodes = o.min_nodes,
                                .max_nodes = o.max_nodes,
                                .nproc_per_node = o.nproc_per_node,
                                .fingerprint = o.fingerprint,
                                .master_port = o.master_port,
                                .run_id = o.resume ? o.resume->record.run_id()
                                                   : random_token().substr(0, 12),
                                .last_call = o.last_call,
                                .host_node_id = o.host_node_id},
                    o.heartbeat_timeout, std::chrono::system_clock::now(),
                    o.resume ? &*o.resume : nullptr),
        hold_limit_(o.heartbeat_timeout / 2),
        on_round_(o.on_round) {
    // Every store write passes here, the workers' included: only the agents'
    // keys (kWatchable) take the lock.
    service->set_observer([this](const std::string& key) {
      if (key.rfind(kWatchable, 0) != 0) return;
      std::lock_guard<std::mutex> lock(held_mu_);
      if (watched_.count(key)) keys_changed_ = true;
    });
    // Nobody but a member's dtrun writes the agents' keys: a stranger with
    // the token (or without one, in an unauthenticated job) cannot mark a
    // round done or failed.
    service->set_write_guard([this](grpc::ServerContextBase* ctx, const std::string& key) {
      if (key.rfind(kWatchable, 0) != 0) return grpc::Status::OK;
      const auto& md = ctx->client_metadata();
      auto it = md.find(kAgentMetadataKey);
      const std::string secret =
          it == md.end() ? "" : std::string(it->second.data(), it->second.size());
      if (!secret.empty() && membership_.is_member_secret(secret)) return grpc::Status::OK;
      refusals_.note(ctx, "a write of '" + key.substr(0, 64) + "'",
                     "only the job's agents write under dtrun/");
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "store keys under dtrun/ are the agents' own; a worker or another "
                          "program may not write them");
    });
    service_ = service;
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_ || wake_; });
        if (stop_) return;
        wake_ = false;
        lock.unlock();
        membership_.tick(std::chrono::system_clock::now());
        answer_held(false);
        record_round();
        lock.lock();
      }
    });
  }
  ~RendezvousService() override {
    stop_ticker();
    service_->set_observer(nullptr);
    service_->set_write_guard(nullptr);
  }

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const proto::JoinRequest* req,
                                 proto::JoinResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (grpc::Status status = admit(ctx, "join", malformed_join(*req)); !status.ok()) {
      reactor->Finish(status);
      return reactor;
    }
    // Answer half a second before the caller's deadline, so that it reads our
    // explanation (who joined) rather than a bare DEADLINE_EXCEEDED.
    auto deadline = ctx->deadline() - std::chrono::milliseconds(500);
    membership_.join_async(
        *req, deadline,
        [this, ctx, reactor, resp](const proto::JoinResponse* layout, const Error* error) {
          if (layout) *resp = *layout;
          if (error && error->category() == ErrorCategory::kConfig)
            refusals_.note(ctx, "a join", error->what());
          if (layout && on_round_) {
            // Recorded first (the ticker, woken now), answered after: a host
            // lost a moment later leaves the round its members run in etcd.
            std::lock_guard<std::mutex> lock(mu_);
            unrecorded_.push_back(Unrecorded{reactor, layout->round()});
            wake_ = true;
            cv_.notify_all();
            return;
          }
          reactor->Finish(layout ? grpc::Status::OK : to_status(*error));
        });
    return reactor;
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const proto::HeartbeatRequest* req,
                                      proto::HeartbeatResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (grpc::Status status = admit(ctx, "heartbeat", malformed_heartbeat(*req)); !status.ok()) {
      reactor->Finish(status);
      return reactor;
    }
    const auto now = std::chrono::system_clock::now();
    std::lock_guard<std::mutex> lock(held_mu_);
    // Under held_mu_: a change between this answer and holding the call is
    // seen by the next tick (keys_changed_, the generation).
    std::string refused;
    if (answer(*req, resp, now, &refused) || req->hold_ms() <= 0 || stopping_) {
      if (!refused.empty()) refusals_.note(ctx, "a heartbeat", refused);
      reactor->Finish(refused.empty() ? grpc::Status::OK
                                      : grpc::Status(grpc::StatusCode::PERMISSION_DENIED, refused));
      return reactor;
    }
    const auto hold = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(req->hold_ms()),
        std::chrono::duration_cast<std::chrono::milliseconds>(hold_limit_));
    for (const std::string& key : req->keys()) {
      if (key.rfind(kWatchable, 0) == 0) watched_.insert(key);
    }
    held_.push_back(Held{ctx, reactor, req, resp, now, now + hold});
    return reactor;
  }

  void stop_ticker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
  }

  // The host's own agent's heartbeat: what a call through gRPC gets, at once.
  std::string beat_in_process(const proto::HeartbeatRequest& req, proto::HeartbeatResponse* resp) {
    std::lock_guard<std::mutex> lock(held_mu_);
    std::string refused;
    answer(req, resp, std::chrono::system_clock::now(), &refused);
    return refused;
  }

  // Before the server shuts down: every waiting join and held heartbeat is
  // answered (the job failed), and no call is held any more.
  void cancel() {
    membership_.cancel("the rendezvous host is shutting down");
    drop_unrecorded();
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      stopping_ = true;
    }
    answer_held(true);
    // Nothing more to tick (the host's own agent may keep this service
    // beyond the server: in_process_beat).
    stop_ticker();
  }

 private:
  // The door: the token, then the request's fields (`malformed`: what is
  // wrong with them, or empty); a refusal is logged with the peer.
  grpc::Status admit(grpc::ServerContextBase* ctx, const char* what, const std::string& malformed) {
    grpc::Status status = check_token(ctx, token_);
    if (status.ok() && !malformed.empty())
      status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string("malformed ") + what + ": " + malformed);
    if (!status.ok()) refusals_.note(ctx, std::string("a ") + what, status.error_message());
    return status;
  }

  struct Held {
    grpc::CallbackServerContext* ctx;
    grpc::ServerUnaryReactor* reactor;
    const proto::HeartbeatRequest* request;
    proto::HeartbeatResponse* response;
    SystemTime arrived;
    SystemTime until;
  };

  static NodeState state_of(const proto::HeartbeatRequest& req) {
    return req.state() == proto::HeartbeatRequest::DONE      ? NodeState::kDone
           : req.state() == proto::HeartbeatRequest::LEAVING ? NodeState::kLeaving
                                                             : NodeState::kRunning;
  }

  // Fills the answer; true when it has news (a failure, rejoin, a watched key,
  // or a refusal: *refused says why).
  // `arrived`: when the call came (a sign of life); none: it was held.
  bool answer(const proto::HeartbeatRequest& req, proto::HeartbeatResponse* resp,
              std::optional<SystemTime> arrived, std::string* refused = nullptr) {
    Beat beat = arrived ? membership_.heartbeat(req.round(), req.node_rank(), req.agent_secret(),
                                                state_of(req), *arrived)
                        : membership_.peek(req.round(), req.node_rank());
    if (!beat.refused.empty()) {
      if (refused) *refused = beat.refused;
      return true;
    }
    resp->set_failure(beat.failure);
    resp->set_rejoin(beat.rejoin);
    resp->set_change(beat.change);
    resp->set_loss(beat.loss);
    resp->mutable_values()->clear();
    for (const std::string& key : req.keys()) {
      if (auto value = store_->try_get(key)) (*resp->mutable_values())[key] = *value;
    }
    return !beat.failure.empty() || beat.rejoin || !resp->values().empty();
  }

  // Answers the held calls that are due, or all of them when something
  // changed (or `all`: the server stops).
  void answer_held(bool all) {
    const long long generation = membership_.generation();
    const auto now = std::chrono::system_clock::now();
    std::lock_guard<std::mutex> lock(held_mu_);
    const bool news = all || keys_changed_ || generation != generation_;
    keys_changed_ = false;
    generation_ = generation;
    // A call its agent cancelled: its dtrun may be gone (Membership::call_closed).
    for (auto it = held_.begin(); it != held_.end();) {
      if (!it->ctx->IsCancelled()) {
        ++it;
        continue;
      }
      membership_.call_closed(it->request->round(), it->request->node_rank(), it->arrived, now);
      it->reactor->Finish(grpc::Status::CANCELLED);
      it = held_.erase(it);
    }
    // Every call holds for about the same time: the due ones are in front.
    while (!held_.empty() && (news || held_.front().until <= now)) {
      Held h = held_.front();
      held_.pop_front();
      answer(*h.request, h.response, std::nullopt);
      h.reactor->Finish(grpc::Status::OK);
    }
  }

  std::string token_;
  MemoryStore* store_;
  StoreService* service_ = nullptr;
  RefusalLog refusals_;
  // A round that started since the last tick goes to on_round_ (etcd's
  // record); then its members get their layouts. A round that cannot be
  // recorded is not started: its joins fail (they look for the next host).
  void record_round() {
    if (!on_round_) return;
    std::string failed;
    // Every tick: the members are copied only when a new round started.
    const int running = membership_.running_round();
    if (running >= 0 && running != recorded_) {
      const proto::RoundRecord record = membership_.record();
      try {
        on_round_(record);
        recorded_ = record.round();
      } catch (const Error& e) {
        failed = e.what();
        log::get("rendezvous")->warn("could not record round {}: {}", record.round(), failed);
      }
    }
    std::vector<Unrecorded> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::stable_partition(
          unrecorded_.begin(), unrecorded_.end(),
          [&](const Unrecorded& u) { return u.round > recorded_ && failed.empty(); });
      ready.assign(it, unrecorded_.end());
      unrecorded_.erase(it, unrecorded_.end());
    }
    for (const Unrecorded& u : ready)
      u.reactor->Finish(u.round <= recorded_
                            ? grpc::Status::OK
                            : grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                           "the rendezvous host could not record round " +
                                               std::to_string(u.round) + ": " + failed));
  }
  // Shutting down: the joins still waiting for their round's record fail.
  void drop_unrecorded() {
    std::vector<Unrecorded> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(unrecorded_);
    }
    for (const Unrecorded& u : left)
      u.reactor->Finish(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "the rendezvous host is shutting down"));
  }

  Membership membership_;
  const std::chrono::milliseconds hold_limit_;
  const std::function<void(const proto::RoundRecord&)> on_round_;
  int recorded_ = -1;
  std::mutex held_mu_;
  std::deque<Held> held_;
  std::set<std::string> watched_;
  bool keys_changed_ = false;
  bool stopping_ = false;
  long long generation_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool wake_ = false;  // a join waits for its round's record
  struct Unrecorded {
    grpc::ServerUnaryReactor* reactor;
    int round;
  };
  std::vector<Unrecorded> unrecorded_;  // under mu_
  std::thread ticker_;
};

}  // namespace

struct RendezvousServer::Impl {
  std::unique_ptr<StoreService> store;
  std::unique_ptr<RendezvousService> rendezvous;
  std::unique_ptr<TlsDoor> door;  // with TLS: names the peers it refuses
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

RendezvousServer::RendezvousServer(const ServerOptions& o) : impl_(std::make_shared<Impl>()) {
  if (o.port != 0) check_bindable(o.bind_ip, o.port);
  impl_->store = std::make_unique<StoreService>(o.token, o.store_limits);
  impl_->rendezvous = std::make_unique<RendezvousService>(o, impl_->store.get());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  bound_control_server(builder);
  impl_->door = add_control_port(builder, o.bind_ip, o.port, o.tls, "rendezvous", &impl_->port);
  builder.RegisterService(impl_->store.get());
  builder.RegisterService(impl_->rendezvous.get());
  impl_->server = builder.BuildAndStart();
  if (impl_->server && impl_->door) impl_->door->open();
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

InProcessBeat RendezvousServer::in_process_beat() const {
  return [impl = impl_](const proto::HeartbeatRequest& req, proto::HeartbeatResponse* resp) {
    return impl->rendezvous->beat_in_process(req, resp);
  };
}

void RendezvousServer::shutdown() {
  if (!impl_->server) return;
  impl_->rendezvous->cancel();
  impl_->store->cancel_waits();
  if (impl_->door) impl_->door->close();
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace rtd::launcher
