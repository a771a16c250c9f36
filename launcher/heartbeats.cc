// The agent's side of the Heartbeat call: a thread that keeps one call open.
#include "launcher/heartbeats.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/store/grpc_status.h"
#include "runtime/core/store/tls.h"

namespace rtd::launcher {
namespace {

proto::HeartbeatRequest::State to_proto(NodeState state) {
  return state == NodeState::kDone      ? proto::HeartbeatRequest::DONE
         : state == NodeState::kLeaving ? proto::HeartbeatRequest::LEAVING
                                        : proto::HeartbeatRequest::RUNNING;
}

HeartbeatReply reply_of(const proto::HeartbeatResponse& resp) {
  HeartbeatReply reply{resp.failure(), resp.rejoin(), resp.change(), resp.loss(), {}, ""};
  for (const auto& [key, value] : resp.values()) reply.values[key] = value;
  return reply;
}

// How often the host's own agent beats in process: the host's tick.
constexpr std::chrono::milliseconds kInProcessTick{100};

}  // namespace

std::chrono::milliseconds heartbeat_hold(std::chrono::milliseconds timeout) {
  return std::max(std::chrono::milliseconds(100), timeout / 3);
}

struct HeartbeatClient::Impl {
  std::string address;
  std::string token;
  std::chrono::milliseconds timeout;
  std::unique_ptr<proto::Rendezvous::Stub> stub;  // none with in_process
  InProcessBeat in_process;
  // What to beat for (round < 0: nothing yet); `version` counts watch() changes.
  proto::HeartbeatRequest request;
  long long version = 0;
  std::optional<HeartbeatReply> news;
  // When the host last answered (or the client started): the host is lost
  // once it has not answered for `timeout`.
  std::chrono::system_clock::time_point last_answer;
  grpc::ClientContext* in_flight = nullptr;
  bool stop = false;
};

HeartbeatClient::HeartbeatClient(const std::string& address, const std::string& token,
                                 const std::string& secret, std::chrono::milliseconds timeout,
                                 const TlsFiles& tls, InProcessBeat in_process)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = address;
  impl_->token = token;
  impl_->timeout = timeout;
  impl_->in_process = std::move(in_process);
  if (!impl_->in_process)
    impl_->stub =
        proto::Rendezvous::NewStub(grpc::CreateChannel(address, channel_credentials(tls)));
  impl_->request.set_round(-1);
  impl_->request.set_agent_secret(secret);
  impl_->request.set_hold_ms(heartbeat_hold(timeout).count());
  impl_->last_answer = std::chrono::system_clock::now();
  thread_ = std::thread([this] { loop(); });
}

HeartbeatClient::~HeartbeatClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    impl_->stop = true;
    if (impl_->in_flight) impl_->in_flight->TryCancel();
  }
  cv_.notify_all();
  thread_.join();
}

void HeartbeatClient::watch(int round, int node_rank, NodeState state,
                            const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  proto::HeartbeatRequest& r = impl_->request;
  const bool same = r.round() == round && r.node_rank() == node_rank &&
                    r.state() == to_proto(state) &&
                    std::equal(keys.begin(), keys.end(), r.keys().begin(), r.keys().end());
  if (same) return;
  // Beating starts now: the host's silence is counted from here.
  if (r.round() < 0) impl_->last_answer = std::chrono::system_clock::now();
  r.set_round(round);
  r.set_node_rank(node_rank);
  r.set_state(to_proto(state));
  r.clear_keys();
  for (const std::string& key : keys) r.add_keys(key);
  ++impl_->version;
  impl_->news.reset();
  if (impl_->in_flight) impl_->in_flight->TryCancel();
  cv_.notify_all();
}

std::optional<HeartbeatReply> HeartbeatClient::news() {
  std::lock_guard<std::mutex> lock(mu_);
  return impl_->news;
}

HeartbeatReply HeartbeatClient::beat_now(int round, int node_rank, NodeState state) {
  proto::HeartbeatRequest req;
  req.set_round(round);
  req.set_node_rank(node_rank);
  req.set_state(to_proto(state));
  req.set_agent_secret(impl_->request.agent_secret());
  proto::HeartbeatResponse resp;
  if (impl_->in_process) {
    if (std::string refused = impl_->in_process(req, &resp); !refused.empty())
      throw Error(ErrorCategory::kConfig, "heartbeat refused by the rendezvous host: " + refused);
    return reply_of(resp);
  }
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, impl_->token);
  ctx.set_deadline(std::chrono::system_clock::now() + impl_->timeout);
  grpc::Status status = impl_->stub->Heartbeat(&ctx, req, &resp);
  if (!status.ok()) throw error_from_grpc(status, "heartbeat", impl_->address);
  return reply_of(resp);
}

void HeartbeatClient::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Nothing to beat for, or news not yet taken in by a watch() change:
    // wait (after news, beat again each hold, as a sign of life).
    const long long version = impl_->version;
    if (impl_->request.round() < 0 || impl_->news) {
      const auto hold = std::chrono::milliseconds(impl_->request.hold_ms());
      cv_.wait_for(lock, hold, [&] { return impl_->stop || impl_->version != version; });
      if (impl_->stop) return;
      if (impl_->version != version || impl_->request.round() < 0) continue;
    }
    if (impl_->stop) return;
    proto::HeartbeatRequest req = impl_->request;
    const bool had_news = impl_->news.has_value();
    if (had_news) req.set_hold_ms(0);  // a sign of life only
    proto::HeartbeatResponse resp;
    grpc::Status status;
    if (impl_->in_process) {
      // The host's own agent: answered at once, then beat again next tick.
      lock.unlock();
      const std::string refused = impl_->in_process(req, &resp);
      lock.lock();
      if (!refused.empty()) status = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, refused);
    } else {
      grpc::ClientContext ctx;
      ctx.AddMetadata(kTokenMetadataKey, impl_->token);
      // A held call is answered within its hold: the deadline is the moment
      // the host will have been silent for the whole timeout.
      ctx.set_deadline(impl_->last_answer + impl_->timeout);
      impl_->in_flight = &ctx;
      lock.unlock();
      status = impl_->stub->Heartbeat(&ctx, req, &resp);
      lock.lock();
      impl_->in_flight = nullptr;
    }
    if (impl_->stop) return;
    if (status.ok()) impl_->last_answer = std::chrono::system_clock::now();
    if (impl_->version != version || had_news) continue;  // watch() changed, or a sign of life
    if (!status.ok()) {
      const std::string why = status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                  ? "the rendezvous host at " + impl_->address +
                                        " has not answered for " +
                                        std::to_string(impl_->timeout.count() / 1000) +
                                        " s (--heartbeat-timeout): it was killed, or is unreachable"
                                  : error_from_grpc(status, "heartbeat", impl_->address).what();
      impl_->news = HeartbeatReply{"", false, "", false, {}, why};
      continue;
    }
    if (!resp.failure().empty() || resp.rejoin() || !resp.values().empty()) {
      impl_->news = reply_of(resp);
    } else if (impl_->in_process) {
      cv_.wait_for(lock, kInProcessTick, [&] { return impl_->stop || impl_->version != version; });
    }
  }
}

}  // namespace rtd::launcher
