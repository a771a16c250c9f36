// RendezvousServer: the Store service (runtime/core/store/store_service.h) and
// the Rendezvous (rounds that collect agents, check they agree and hand out
// ranks; the members' heartbeats).
#include "launcher/rendezvous_server.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "launcher/membership.h"
#include "launcher/net.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/store_service.h"

namespace rtd::launcher {
namespace {

// Join and Heartbeat through gRPC's callback API: a waiting agent holds no
// server thread, so one server holds thousands of them
// (bench/rendezvous_scale). A heartbeat with nothing to tell is held (up to
// its hold_ms) and answered when something happens. A thread of our own
// ticks every 100 ms: the membership (expired joins, last calls, silent
// members), then the held heartbeats that are due or have news.
class RendezvousService final : public proto::Rendezvous::CallbackService {
 public:
  // A held heartbeat is woken when one of its keys changes only for keys
  // under this prefix (the agents' own); others are answered when present.
  static constexpr const char* kWatchable = "dtrun/";

  RendezvousService(const ServerOptions& o, MemoryStore* store)
      : token_(o.token),
        store_(store),
        membership_(RoundConfig{.min_nodes = o.min_nodes,
                                .max_nodes = o.max_nodes,
                                .nproc_per_node = o.nproc_per_node,
                                .fingerprint = o.fingerprint,
                                .master_port = o.master_port,
                                .run_id = random_token().substr(0, 12),
                                .last_call = o.last_call},
                    o.heartbeat_timeout),
        hold_limit_(o.heartbeat_timeout / 2) {
    // Every store write passes here, the workers' included: only the agents'
    // keys (kWatchable) take the lock.
    store_->set_observer([this](const std::string& key) {
      if (key.rfind(kWatchable, 0) != 0) return;
      std::lock_guard<std::mutex> lock(held_mu_);
      if (watched_.count(key)) keys_changed_ = true;
    });
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
        lock.unlock();
        membership_.tick(std::chrono::system_clock::now());
        answer_held(false);
        lock.lock();
      }
    });
  }
  ~RendezvousService() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    ticker_.join();
    store_->set_observer(nullptr);
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
    membership_.join_async(*req, deadline,
                           [reactor, resp](const proto::JoinResponse* layout, const Error* error) {
                             if (layout) *resp = *layout;
                             reactor->Finish(layout ? grpc::Status::OK : to_status(*error));
                           });
    return reactor;
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const proto::HeartbeatRequest* req,
                                      proto::HeartbeatResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    grpc::Status status = check_token(ctx, token_);
    if (!status.ok()) {
      reactor->Finish(status);
      return reactor;
    }
    const auto now = std::chrono::system_clock::now();
    std::lock_guard<std::mutex> lock(held_mu_);
    // Under held_mu_: a change between this answer and holding the call is
    // seen by the next tick (keys_changed_, the generation).
    if (answer(*req, resp, true) || req->hold_ms() <= 0 || stopping_) {
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    const auto hold = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(req->hold_ms()),
        std::chrono::duration_cast<std::chrono::milliseconds>(hold_limit_));
    for (const std::string& key : req->keys()) {
      if (key.rfind(kWatchable, 0) == 0) watched_.insert(key);
    }
    held_.push_back(Held{reactor, req, resp, now + hold});
    return reactor;
  }

  // Before the server shuts down: every waiting join and held heartbeat is
  // answered (the job failed), and no call is held any more.
  void cancel() {
    membership_.cancel("the rendezvous host is shutting down");
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      stopping_ = true;
    }
    answer_held(true);
  }

 private:
  struct Held {
    grpc::ServerUnaryReactor* reactor;
    const proto::HeartbeatRequest* request;
    proto::HeartbeatResponse* response;
    SystemTime until;
  };

  static NodeState state_of(const proto::HeartbeatRequest& req) {
    return req.state() == proto::HeartbeatRequest::DONE      ? NodeState::kDone
           : req.state() == proto::HeartbeatRequest::LEAVING ? NodeState::kLeaving
                                                             : NodeState::kRunning;
  }

  // Fills the answer; true when it has news (a failure, rejoin, a watched key).
  // `arrived`: the call just came (a sign of life), else it was held.
  bool answer(const proto::HeartbeatRequest& req, proto::HeartbeatResponse* resp, bool arrived) {
    Beat beat = arrived ? membership_.heartbeat(req.round(), req.node_rank(), state_of(req),
                                                std::chrono::system_clock::now())
                        : membership_.peek(req.round(), req.node_rank());
    resp->set_failure(beat.failure);
    resp->set_rejoin(beat.rejoin);
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
    // Every call holds for about the same time: the due ones are in front.
    while (!held_.empty() && (news || held_.front().until <= now)) {
      Held h = held_.front();
      held_.pop_front();
      answer(*h.request, h.response, false);
      h.reactor->Finish(grpc::Status::OK);
    }
  }

  std::string token_;
  MemoryStore* store_;
  Membership membership_;
  const std::chrono::milliseconds hold_limit_;
  std::mutex held_mu_;
  std::deque<Held> held_;
  std::set<std::string> watched_;
  bool keys_changed_ = false;
  bool stopping_ = false;
  long long generation_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread ticker_;
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
  impl_->rendezvous = std::make_unique<RendezvousService>(o, &impl_->store->memory());
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 1);
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
