// The other nodes of an agent's round, seen through heartbeats and the store.
#include "launcher/peers.h"

#include <thread>

#include "launcher/signals.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd::launcher {
namespace {

constexpr std::chrono::milliseconds kPoll{500};
constexpr std::chrono::milliseconds kLeavePoll{100};  // the host alone polls while the others leave
constexpr std::chrono::seconds kLeaveWait{10};        // the host keeps the store up for the others
// A node whose worker failed waits this long for the other nodes' records.
constexpr std::chrono::milliseconds kCauseWait{1000};

// "code|reason", as written under kJobFailedKey and round_key(R, "failed").
Outcome parse_failure(const std::string& value, bool restart) {
  auto bar = value.find('|');
  int code = 1;
  try {
    code = std::stoi(value.substr(0, bar));
  } catch (const std::exception&) {
  }
  Outcome out{Ending::kStopRequested, code, -1,
              "another node failed: " + (bar == std::string::npos ? value : value.substr(bar + 1))};
  out.restart = restart;
  return out;
}

}  // namespace

Outcome Peers::lost_host(const std::string& why) const {
  if (!host_replaceable_)
    return Outcome{Ending::kStopRequested, 1, -1, "lost contact with the rendezvous host: " + why};
  // Through etcd another agent takes over: a change of membership.
  Outcome out{Ending::kStopRequested, 0, -1,
              "the host of the job's rounds was lost (" + why + "); another node takes over"};
  out.rejoin = true;
  out.host_lost = true;
  return out;
}

std::string round_key(int round, const std::string& what) {
  return "dtrun/round" + std::to_string(round) + "/" + what;
}

Peers::Peers(std::shared_ptr<Store> store, std::unique_ptr<HeartbeatClient> heartbeats,
             bool host_replaceable)
    : store_(std::move(store)),
      heartbeats_(std::move(heartbeats)),
      host_replaceable_(host_replaceable) {}

std::optional<Outcome> Peers::check(int round, int node_rank, NodeState state) {
  const std::string round_failed = round_key(round, "failed");
  heartbeats_->watch(round, node_rank, state, {kJobFailedKey, round_failed});
  std::optional<HeartbeatReply> reply = heartbeats_->news();
  if (!reply) return std::nullopt;
  if (!reply->lost.empty()) return lost_host(reply->lost);
  if (auto it = reply->values.find(kJobFailedKey); it != reply->values.end())
    return parse_failure(it->second, false);
  if (!reply->failure.empty()) return Outcome{Ending::kStopRequested, 1, -1, reply->failure};
  if (auto it = reply->values.find(round_failed); it != reply->values.end())
    return parse_failure(it->second, true);
  if (reply->rejoin) {
    Outcome out{Ending::kStopRequested, 0, -1,
                "the job's membership changes (" +
                    (reply->change.empty() ? std::string("a node joined, or one was lost")
                                           : reply->change) +
                    ")"};
    out.rejoin = true;
    out.node_lost = reply->loss;
    return out;
  }
  return std::nullopt;
}

Outcome Peers::first_cause(int round, int node_rank, int nnodes, Outcome mine) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const long long my_ms = duration_cast<milliseconds>(mine.failed_at.time_since_epoch()).count();
  const std::string prefix = round_key(round, "failure/");
  store_->set(prefix + std::to_string(node_rank),
              std::to_string(my_ms) + "|" + std::to_string(mine.exit_code) + "|" + mine.reason);
  long long best_ms = my_ms;
  int best_node = node_rank, best_code = mine.exit_code;
  std::string best_reason;
  const auto give_up = std::chrono::steady_clock::now() + kCauseWait;
  do {
    std::this_thread::sleep_for(kCauseWait / 10);
    for (int n = 0; n < nnodes; ++n) {
      if (n == node_rank) continue;
      auto record = store_->try_get(prefix + std::to_string(n));
      if (!record) continue;
      const auto bar1 = record->find('|'), bar2 = record->find('|', bar1 + 1);
      if (bar1 == std::string::npos || bar2 == std::string::npos) continue;
      try {
        const long long ms = std::stoll(record->substr(0, bar1));
        if (ms < best_ms) {
          best_ms = ms;
          best_node = n;
          best_code = std::stoi(record->substr(bar1 + 1, bar2 - bar1 - 1));
          best_reason = record->substr(bar2 + 1);
        }
      } catch (const std::exception&) {
      }
    }
  } while (std::chrono::steady_clock::now() < give_up);
  if (best_node == node_rank) return mine;
  Outcome out = mine;
  out.exit_code = best_code;
  out.reason = "node " + std::to_string(best_node) + " failed first: " + best_reason +
               "; on this node, " + mine.reason + " " + std::to_string(my_ms - best_ms) +
               " ms later";
  return out;
}

std::optional<Outcome> Peers::wait_for_news(int round, int node_rank,
                                            std::chrono::milliseconds wait) {
  const auto give_up = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (auto news = check(round, node_rank, NodeState::kRunning)) return news;
    if (std::chrono::steady_clock::now() >= give_up) return std::nullopt;
    std::this_thread::sleep_for(kCauseWait / 10);
  }
}

void Peers::record_failure(int round, int node_rank, const Outcome& out, bool job) {
  try {
    store_->compare_set(
        job ? kJobFailedKey : round_key(round, "failed"), "",
        std::to_string(out.exit_code) + "|node " + std::to_string(node_rank) + ": " + out.reason);
  } catch (const Error& e) {
    log::get("launcher")->warn("could not tell the other nodes: {}", e.what());
  }
}

std::optional<Outcome> Peers::meet_done(int round, int node_rank, int nnodes) {
  const std::string key = round_key(round, "done");
  try {
    store_->add(key, 1);
    for (;;) {
      if (auto out = check(round, node_rank, NodeState::kDone)) return out;
      if (store_->add(key, 0) >= nnodes) return std::nullopt;
      if (int sig = take_pending_signal()) {
        return Outcome{Ending::kSignal, 128 + sig, -1, "signal " + std::to_string(sig)};
      }
      std::this_thread::sleep_for(kPoll);
    }
  } catch (const Error& e) {
    return lost_host(e.what());
  }
}

void Peers::leave(int round, int node_rank, int nnodes, bool host) {
  const std::string key = round_key(round, "leaving");
  try {
    if (!host) heartbeats_->beat_now(round, node_rank, NodeState::kLeaving);
    store_->add(key, 1);
    if (!host) return;
    const auto give_up = std::chrono::steady_clock::now() + kLeaveWait;
    while (store_->add(key, 0) < nnodes && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(kLeavePoll);
    }
  } catch (const Error& e) {
    log::get("launcher")
        ->warn("could not tell the other nodes that this one is done: {}", e.what());
  }
}

}  // namespace rtd::launcher
