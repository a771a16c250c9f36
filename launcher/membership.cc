// Rounds chained into a job, and the members' heartbeats (docs/rendezvous.md).
#include "launcher/membership.h"

#include "launcher/net.h"
#include "runtime/core/log.h"
#include "runtime/core/secrets_equal.h"

namespace rtd::launcher {
namespace {
long long seconds(std::chrono::system_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}
}  // namespace

Membership::Membership(RoundConfig job, std::chrono::milliseconds heartbeat_timeout, SystemTime now,
                       const ResumeFrom* resume)
    : job_(std::move(job)), heartbeat_timeout_(heartbeat_timeout) {
  if (!resume) {
    forming_ = std::make_unique<Round>(round_config(0), now);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_ = resume->record.round();
  for (const auto& m : resume->record.members()) {
    members_.push_back(
        Member{Round::Member{m.node_id(), m.host(), m.node_rank(), m.secret()}, now});
    secrets_[m.node_id()] = m.secret();
  }
  for (Member& m : members_) {
    auto gone = resume->lost.find(m.who.node_id);
    if (gone != resume->lost.end() && failure_.empty()) lose_locked(m, now, gone->second);
  }
  if (!forming_ && failure_.empty()) open_locked(now, "the rendezvous host changed");
}

int Membership::running_round() {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

proto::RoundRecord Membership::record() {
  std::lock_guard<std::mutex> lock(mu_);
  proto::RoundRecord r;
  r.set_round(running_);
  r.set_run_id(job_.run_id);
  for (const Member& m : members_) {
    auto* out = r.add_members();
    out->set_node_id(m.who.node_id);
    out->set_host(m.who.host);
    out->set_node_rank(m.who.node_rank);
    out->set_secret(m.who.secret);
  }
  return r;
}

RoundConfig Membership::round_config(int round) const {
  RoundConfig c = job_;
  c.round = round;
  c.previous.clear();
  // A member that still beats is stopping its workers (up to its grace
  // period): it is waited for; a silent one is dropped when found (tick()).
  // This wait is the last resort for one that beats but never comes back.
  c.rejoin_wait = 4 * heartbeat_timeout_ + std::chrono::seconds(30);
  return c;
}

// A new round for a running job: it waits for every member not lost.
void Membership::open_locked(SystemTime now, const std::string& why, bool loss) {
  change_ = why;
  change_loss_ = loss;
  RoundConfig c = round_config(running_ + 1);
  for (const Member& m : members_) {
    if (!m.lost) c.previous[m.who.node_id] = m.who.node_rank;
  }
  forming_ = std::make_unique<Round>(std::move(c), now);
  ++generation_;
}

void Membership::promote_locked(SystemTime now) {
  if (!forming_ || !forming_->closed()) return;
  members_.clear();
  for (const Round::Member& who : forming_->members()) {
    members_.push_back(Member{who, now});
    secrets_[who.node_id] = who.secret;
  }
  ++running_;
  forming_.reset();
  ++generation_;
  if (running_ > 0) {
    log::get("rendezvous")
        ->info("round {} started with {} node(s)", running_, static_cast<int>(members_.size()));
  }
}

// Members may always rejoin; a newcomer needs room, and a job not finishing.
std::string Membership::refusal_locked(const proto::JoinRequest& r) const {
  int alive = 0;
  for (const Member& m : members_) {
    if (m.who.node_id == r.node_id() && !m.lost) return "";
    alive += m.lost ? 0 : 1;
  }
  for (const Member& m : members_) {
    if (!m.lost && m.state != NodeState::kRunning) {
      return "rendezvous: the job is finishing (node " + std::to_string(m.who.node_rank) +
             "'s workers are done); node at " + r.host() + " cannot join it now";
    }
  }
  if (alive >= job_.max_nodes) {
    return "rendezvous: the job already has " + std::to_string(alive) + " node(s), the most " +
           nnodes_flag(job_.min_nodes, job_.max_nodes) + " allows; node at " + r.host() +
           " is one too many";
  }
  return "";
}

void Membership::join_async(const proto::JoinRequest& given, SystemTime deadline,
                            Round::Done done) {
  std::string refusal;
  proto::JoinRequest request = given;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The node_id is the agent's only while it proves to be: a join naming a
    // member's id must carry that member's secret.
    auto known = secrets_.find(request.node_id());
    const bool imposter = known != secrets_.end()
                              ? !secrets_equal(request.agent_secret(), known->second)
                              : !request.agent_secret().empty();
    request.set_agent_secret(known != secrets_.end() ? known->second : random_token());
    if (imposter) {
      refusal = "rendezvous refused this node: node at " + request.host() +
                " names an agent id it was not issued (or carries a secret of another job); "
                "restart its dtrun";
    } else if (!failure_.empty()) {
      refusal = failure_;
    } else if (!forming_) {
      refusal = refusal_locked(request);
      if (refusal.empty()) {
        const std::string why =
            "node at " + request.host() +
            (request.last_round() == running_ ? " rejoins" : " joins the running job");
        log::get("rendezvous")->info("{}: round {} forms", why, running_ + 1);
        open_locked(std::chrono::system_clock::now(), why);
      }
    }
    if (refusal.empty()) {
      forming_->join_async(request, deadline, std::move(done));
      promote_locked(std::chrono::system_clock::now());
    }
  }
  if (!refusal.empty()) {
    Error error(ErrorCategory::kConfig, refusal);
    done(nullptr, &error);
  }
}

Beat Membership::heartbeat(int round, int node_rank, const std::string& secret, NodeState state,
                           SystemTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  Beat beat{failure_, forming_ != nullptr, forming_ ? change_ : "", "",
            forming_ != nullptr && change_loss_};
  if (round != running_ || node_rank < 0 || node_rank >= static_cast<int>(members_.size()) ||
      members_[node_rank].lost) {
    beat.rejoin = true;  // left behind (counted as lost): it may come back as a newcomer
    return beat;
  }
  Member& m = members_[node_rank];
  if (!secrets_equal(secret, m.who.secret)) {
    return Beat{"", false, "",
                "this heartbeat does not carry node " + std::to_string(node_rank) +
                    "'s agent secret: only that node's dtrun speaks for it"};
  }
  m.closed_since.reset();
  m.last_seen = now;
  m.state = state;
  return beat;
}

Beat Membership::peek(int round, int node_rank) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool member = round == running_ && node_rank >= 0 &&
                      node_rank < static_cast<int>(members_.size()) && !members_[node_rank].lost;
  return Beat{failure_, forming_ != nullptr || !member, forming_ ? change_ : "", "",
              forming_ != nullptr && change_loss_};
}

void Membership::call_closed(int round, int node_rank, SystemTime arrived, SystemTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (round != running_ || node_rank < 0 || node_rank >= static_cast<int>(members_.size())) return;
  Member& m = members_[node_rank];
  // A newer call already came (the agent changed what it beats for).
  if (m.lost || m.last_seen > arrived || m.closed_since) return;
  m.closed_since = now;
}

void Membership::lose_locked(Member& m, SystemTime now, const std::string& why) {
  m.lost = true;
  int alive = 0;
  bool finishing = false;
  for (const Member& other : members_) {
    alive += other.lost ? 0 : 1;
    finishing = finishing || (!other.lost && other.state != NodeState::kRunning);
  }
  std::string what = "node " + std::to_string(m.who.node_rank) + " (" + m.who.host + ") " + why;
  const bool elastic = job_.min_nodes < job_.max_nodes;
  if (elastic && !finishing && alive >= job_.min_nodes) {
    log::get("rendezvous")->warn("{}; going on with the {} other node(s)", what, alive);
    if (forming_)
      forming_->forget(m.who.node_id);
    else
      open_locked(now, what, true);
    return;
  }
  if (elastic && !finishing) {
    what += "; " + std::to_string(alive) + " node(s) remain, fewer than the " +
            std::to_string(job_.min_nodes) + " that " +
            nnodes_flag(job_.min_nodes, job_.max_nodes) + " needs";
  }
  failure_ = what;
  ++generation_;
  if (forming_) forming_->cancel(what);
}

void Membership::tick(SystemTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (forming_) {
    forming_->tick(now);
    promote_locked(now);
    if (forming_ && running_ >= 0 && !forming_->failure().empty() && failure_.empty()) {
      failure_ = forming_->failure();
      ++generation_;
    }
  }
  // A lone node has nobody to lose; while a round forms, members that are
  // back wait in Join without beating, and the round's own wait covers the rest.
  if (!failure_.empty() || running_ < 0 || job_.max_nodes == 1) return;
  for (Member& m : members_) {
    if (m.lost || m.state == NodeState::kLeaving) continue;
    if (forming_ && forming_->has_joined(m.who.node_id)) continue;
    if (now - m.last_seen > heartbeat_timeout_) {
      lose_locked(m, now,
                  "has not been heard from for " + std::to_string(seconds(now - m.last_seen)) +
                      " s (--heartbeat-timeout; its dtrun was stopped, or its host is "
                      "unreachable)");
    } else if (m.state == NodeState::kRunning && m.closed_since &&
               now - *m.closed_since >= kReconnectGrace) {
      lose_locked(m, now,
                  "was lost: its dtrun's connection to the rendezvous host closed (it exited or "
                  "was killed)");
    }
    if (!failure_.empty()) return;
  }
}

void Membership::cancel(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty()) failure_ = "rendezvous cancelled: " + why;
  ++generation_;
  if (forming_) forming_->cancel(why);
}

bool Membership::is_member_secret(const std::string& secret) {
  std::lock_guard<std::mutex> lock(mu_);
  bool found = false;
  for (const Member& m : members_)
    found = found || (!m.lost && secrets_equal(secret, m.who.secret));
  return found;
}

long long Membership::generation() {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

}  // namespace rtd::launcher
