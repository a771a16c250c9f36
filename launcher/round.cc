// The Join protocol of one rendezvous round (docs/rendezvous.md, "Rounds").
#include "launcher/round.h"

#include <algorithm>
#include <climits>
#include <future>
#include <optional>

#include "rt_dist/error.h"

namespace rtd::launcher {

std::string nnodes_flag(int min_nodes, int max_nodes) {
  return "--nnodes=" + std::to_string(min_nodes) +
         (min_nodes == max_nodes ? "" : ":" + std::to_string(max_nodes));
}

Round::Round(RoundConfig config, SystemTime opened) : config_(std::move(config)), opened_(opened) {}

std::string Round::mismatch(const proto::JoinRequest& r) const {
  const std::string who = "node at " + r.host();
  if (r.nnodes() != config_.max_nodes || r.min_nodes() != config_.min_nodes) {
    return who + " was started with " + nnodes_flag(r.min_nodes(), r.nnodes()) +
           " but node rank 0 with " + nnodes_flag(config_.min_nodes, config_.max_nodes) +
           "; start every node with the same flags";
  }
  if (r.nproc_per_node() != config_.nproc_per_node) {
    return who + " was started with --nproc-per-node=" + std::to_string(r.nproc_per_node()) +
           " but node rank 0 with --nproc-per-node=" + std::to_string(config_.nproc_per_node) +
           "; start every node with the same flags";
  }
  if (r.fingerprint() != config_.fingerprint) {
    return who + " runs a different configuration (" + r.fingerprint() + " vs node rank 0's " +
           config_.fingerprint + "); start every node with the same flags";
  }
  if (r.node_rank() >= config_.max_nodes) {
    return who + " asked for --node-rank=" + std::to_string(r.node_rank()) + " but " +
           nnodes_flag(config_.min_nodes, config_.max_nodes);
  }
  // Rank 0 is the hosting agent's: nobody else takes it, whoever comes first.
  if (r.node_rank() == 0 && !config_.host_node_id.empty() && r.node_id() != config_.host_node_id) {
    return who + " asked for --node-rank=0, which is the rendezvous host's";
  }
  for (const Joined& j : joined_) {
    const proto::JoinRequest& other = j.request;
    if (other.node_id() == r.node_id()) return who + " has already joined this round";
    if (r.node_rank() >= 0 && other.node_rank() == r.node_rank()) {
      return "nodes at " + other.host() + " and " + r.host() +
             " both asked for --node-rank=" + std::to_string(r.node_rank()) +
             "; the first keeps it";
    }
  }
  return "";
}

// Counted as they join (joined_ids_), so that a round of N agents costs
// O(N), not O(N^2), to close.
bool Round::complete_locked() const {
  const int n = static_cast<int>(joined_.size());
  if (n >= config_.max_nodes) return true;
  return !config_.previous.empty() && n >= config_.min_nodes &&
         previous_back_ == config_.previous.size();
}

// Nodes that asked for a rank the closing count cannot hold (--node-rank=3
// in a round that closes with 2) are turned away alone, until the rest fit
// (each turned away shrinks the count); false, and nobody turned away, when
// fewer than the minimum would remain (the round then stays open).
bool Round::try_close_locked(std::vector<Answer>* answers) {
  // joined_[0, fit) keep their place; the rest are moved behind, in order.
  auto fit = joined_.end();
  for (auto bound = joined_.end();; bound = fit) {
    const int n = static_cast<int>(bound - joined_.begin());
    fit = std::stable_partition(joined_.begin(), bound,
                                [n](const Joined& j) { return j.request.node_rank() < n; });
    if (fit == bound) break;
  }
  const int n = static_cast<int>(fit - joined_.begin());
  if (n < config_.min_nodes || n == 0) return false;
  for (auto it = fit; it != joined_.end(); ++it) {
    Joined& j = *it;
    const std::string why = "rendezvous: node at " + j.request.host() +
                            " asked for --node-rank=" + std::to_string(j.request.node_rank()) +
                            " but the round closed with " + std::to_string(n) + " node(s) (" +
                            nnodes_flag(config_.min_nodes, config_.max_nodes) +
                            "); leave --node-rank out in an elastic job";
    note_refusal_locked(why);
    const std::string& id = j.request.node_id();
    if (joined_ids_.erase(id) && config_.previous.count(id)) --previous_back_;
    answers->push_back(Answer{std::move(j.done), std::nullopt, Error(ErrorCategory::kConfig, why)});
  }
  joined_.erase(fit, joined_.end());
  close_locked(answers);
  return true;
}

void Round::note_refusal_locked(const std::string& why) {
  constexpr std::size_t kKept = 4;
  if (refused_.size() == kKept) refused_.erase(refused_.begin());
  refused_.push_back(why);
}

void Round::close_locked(std::vector<Answer>* answers) {
  const int nnodes = static_cast<int>(joined_.size());
  std::vector<bool> taken(nnodes, false);
  // The restarts spent so far: the hosting agent's count, where it joined
  // (it is the authority: a stranger's Join could otherwise claim the
  // budget spent); without a host (or before it joined), the most any
  // member counted.
  int restarts = 0;
  std::optional<int> host_restarts;
  for (const Joined& j : joined_) {
    if (j.request.node_rank() >= 0) taken[j.request.node_rank()] = true;
    restarts = std::max(restarts, j.request.restarts());
    if (!config_.host_node_id.empty() && j.request.node_id() == config_.host_node_id)
      host_restarts = j.request.restarts();
  }
  if (host_restarts) restarts = *host_restarts;
  // Nodes without --node-rank take the free ranks in a stable order: the
  // previous round's members in their order, then by address, then arrival.
  auto order = [this](const Joined* j) {
    auto it = config_.previous.find(j->request.node_id());
    return it == config_.previous.end() ? INT_MAX : it->second;
  };
  std::vector<Joined*> unranked;
  for (auto& j : joined_) {
    if (j.request.node_rank() < 0) unranked.push_back(&j);
  }
  std::stable_sort(unranked.begin(), unranked.end(), [&](const Joined* a, const Joined* b) {
    if (order(a) != order(b)) return order(a) < order(b);
    return a->request.host() < b->request.host();
  });
  int next_free = 0;
  for (Joined* j : unranked) {
    while (taken[next_free]) ++next_free;
    taken[next_free] = true;
    j->request.set_node_rank(next_free);
  }
  proto::JoinResponse layout;
  layout.set_world_size(nnodes * config_.nproc_per_node);
  layout.set_nnodes(nnodes);
  for (const Joined& j : joined_) {
    if (j.request.node_rank() == 0) layout.set_master_addr(j.request.host());
  }
  layout.set_master_port(config_.master_port);
  layout.set_run_id(config_.run_id);
  layout.set_round(config_.round);
  layout.set_restarts(restarts);
  closed_ = true;
  members_.assign(nnodes, Member{});
  for (Joined& j : joined_) {
    const int n = j.request.node_rank();
    members_[n] = Member{j.request.node_id(), j.request.host(), n, j.request.agent_secret()};
    proto::JoinResponse response = layout;
    response.set_node_rank(n);
    response.set_agent_secret(j.request.agent_secret());
    proto::NodeInfo* node = response.mutable_node();
    node->set_host(j.request.host());
    node->set_node_rank(n);
    node->set_nproc(config_.nproc_per_node);
    node->set_first_rank(n * config_.nproc_per_node);
    answers->push_back(Answer{std::move(j.done), std::move(response), std::nullopt});
  }
}

void Round::fail_locked(const std::string& why, std::vector<Answer>* answers) {
  if (failure_.empty()) failure_ = why;
  for (Joined& j : joined_) {
    if (j.done)
      answers->push_back(
          Answer{std::move(j.done), std::nullopt, Error(ErrorCategory::kConfig, failure_)});
  }
  joined_.clear();
  joined_ids_.clear();
  previous_back_ = 0;
}

void Round::deliver(std::vector<Answer>& answers) {
  for (Answer& a : answers) {
    if (!a.done) continue;
    if (a.layout)
      a.done(&*a.layout, nullptr);
    else
      a.done(nullptr, &*a.error);
  }
}

std::string Round::joined_summary_locked() const {
  std::string out;
  for (const Joined& j : joined_) out += (out.empty() ? "" : ", ") + j.request.host();
  return out.empty() ? "none" : out;
}

void Round::join_async(const proto::JoinRequest& request, SystemTime deadline, Done done) {
  std::vector<Answer> answers;
  auto refuse = [&](ErrorCategory category, const std::string& why) {
    answers.push_back(Answer{std::move(done), std::nullopt, Error(category, why)});
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool newcomer = config_.previous.count(request.node_id()) == 0;
    if (failure_.empty() && closed_) {
      refuse(ErrorCategory::kConfig, "rendezvous: all " + std::to_string(members_.size()) +
                                         " nodes have already joined; node at " + request.host() +
                                         " is one too many");
    } else if (!failure_.empty()) {
      refuse(ErrorCategory::kConfig, failure_);
    } else if (std::string why = mismatch(request); !why.empty()) {
      // Turned away alone: whoever sent it, a join never fails, stalls or
      // reshapes the round of those that agree. Those waiting read it in
      // their timeout's message, and the host's log has it at once.
      refuse(ErrorCategory::kConfig, "rendezvous refused this node: " + why);
      note_refusal_locked(why);
    } else {
      joined_.push_back(Joined{request, deadline, std::move(done)});
      if (joined_ids_.insert(request.node_id()).second && !newcomer) ++previous_back_;
      last_join_ = std::chrono::system_clock::now();
      if (complete_locked()) try_close_locked(&answers);
    }
  }
  deliver(answers);
}

void Round::tick(SystemTime now) {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || !failure_.empty()) return;
    const int n = static_cast<int>(joined_.size());
    const std::string flag = nnodes_flag(config_.min_nodes, config_.max_nodes);
    if (config_.previous.empty()) {
      // The first round: with a range, the last call after the minimum.
      if (config_.min_nodes < config_.max_nodes && n >= config_.min_nodes &&
          now >= last_join_ + config_.last_call) {
        try_close_locked(&answers);
      }
    } else if (now >= opened_ + config_.rejoin_wait) {
      // A re-formed round: those back go on without the missing, if enough.
      if (n < config_.min_nodes || !try_close_locked(&answers)) {
        fail_locked("only " + std::to_string(n) + " node(s) came back for round " +
                        std::to_string(config_.round) + " within " +
                        std::to_string(config_.rejoin_wait.count() / 1000) + " s (" +
                        joined_summary_locked() + "), fewer than the " +
                        std::to_string(config_.min_nodes) + " that " + flag + " needs",
                    &answers);
      }
    }
    if (!closed_ && failure_.empty()) {
      std::string summary = joined_summary_locked();
      for (const std::string& why : refused_) summary += "; refused: " + why;
      for (auto it = joined_.begin(); it != joined_.end();) {
        if (it->deadline > now) {
          ++it;
          continue;
        }
        answers.push_back(Answer{
            std::move(it->done), std::nullopt,
            Error(ErrorCategory::kTimeout,
                  "rendezvous: only " + std::to_string(n) + " of " +
                      std::to_string(config_.min_nodes) + " nodes joined before the timeout (" +
                      summary + "); start dtrun on the other nodes with the same --rdzv")});
        const std::string& id = it->request.node_id();
        if (joined_ids_.erase(id) && config_.previous.count(id)) --previous_back_;
        it = joined_.erase(it);
      }
    }
  }
  deliver(answers);
}

proto::JoinResponse Round::join(const proto::JoinRequest& request, SystemTime deadline) {
  std::promise<proto::JoinResponse> answer;
  auto result = answer.get_future();
  join_async(request, deadline, [&answer](const proto::JoinResponse* layout, const Error* error) {
    if (layout)
      answer.set_value(*layout);
    else
      answer.set_exception(std::make_exception_ptr(*error));
  });
  constexpr auto kTick = std::chrono::milliseconds(20);
  while (result.wait_for(kTick) != std::future_status::ready)
    tick(std::chrono::system_clock::now());
  return result.get();
}

void Round::cancel(const std::string& why) {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_ && failure_.empty()) fail_locked("rendezvous cancelled: " + why, &answers);
  }
  deliver(answers);
}

void Round::forget(const std::string& node_id) {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (config_.previous.erase(node_id)) {
      if (joined_ids_.count(node_id)) --previous_back_;
      if (!closed_ && failure_.empty() && complete_locked()) try_close_locked(&answers);
    }
  }
  deliver(answers);
}

bool Round::closed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::string Round::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

std::vector<Round::Member> Round::members() {
  std::lock_guard<std::mutex> lock(mu_);
  return members_;
}

bool Round::has_joined(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return joined_ids_.count(node_id) > 0;
}

}  // namespace rtd::launcher
