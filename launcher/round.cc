// The Join protocol of one rendezvous round (docs/rendezvous.md, "Round").
#include "launcher/round.h"

#include <algorithm>
#include <future>

#include "rt_dist/error.h"

namespace rtd::launcher {

std::string Round::mismatch(const proto::JoinRequest& r) const {
  auto differ = [&](const char* flag, long theirs, long ours) {
    return std::string("node at ") + r.host() + " was started with " + flag + "=" +
           std::to_string(theirs) + " but node rank 0 with " + flag + "=" + std::to_string(ours) +
           "; start every node with the same flags";
  };
  if (r.nnodes() != config_.nnodes) return differ("--nnodes", r.nnodes(), config_.nnodes);
  if (r.nproc_per_node() != config_.nproc_per_node) {
    return differ("--nproc-per-node", r.nproc_per_node(), config_.nproc_per_node);
  }
  if (r.fingerprint() != config_.fingerprint) {
    return "node at " + r.host() + " runs a different configuration (" + r.fingerprint() +
           " vs node rank 0's " + config_.fingerprint + "); start every node with the same flags";
  }
  if (r.node_rank() >= config_.nnodes) {
    return "node at " + r.host() + " asked for --node-rank=" + std::to_string(r.node_rank()) +
           " but --nnodes=" + std::to_string(config_.nnodes);
  }
  for (const Joined& j : joined_) {
    const proto::JoinRequest& other = j.request;
    if (r.node_rank() >= 0 && other.node_rank() == r.node_rank()) {
      return "nodes at " + other.host() + " and " + r.host() +
             " both asked for --node-rank=" + std::to_string(r.node_rank());
    }
  }
  return "";
}

void Round::close_locked(std::vector<Answer>* answers) {
  std::vector<bool> taken(config_.nnodes, false);
  for (const Joined& j : joined_) {
    if (j.request.node_rank() >= 0) taken[j.request.node_rank()] = true;
  }
  // Nodes without --node-rank take the free ranks in a stable order: by
  // address, then by arrival.
  std::vector<Joined*> unranked;
  for (auto& j : joined_) {
    if (j.request.node_rank() < 0) unranked.push_back(&j);
  }
  std::stable_sort(unranked.begin(), unranked.end(), [](const Joined* a, const Joined* b) {
    return a->request.host() < b->request.host();
  });
  int next_free = 0;
  for (Joined* j : unranked) {
    while (taken[next_free]) ++next_free;
    taken[next_free] = true;
    j->request.set_node_rank(next_free);
  }
  layout_.set_world_size(config_.nnodes * config_.nproc_per_node);
  layout_.set_nnodes(config_.nnodes);
  for (const Joined& j : joined_) {
    if (j.request.node_rank() == 0) layout_.set_master_addr(j.request.host());
  }
  layout_.set_master_port(config_.master_port);
  layout_.set_run_id(config_.run_id);
  layout_.set_round(0);
  closed_ = true;
  for (Joined& j : joined_) {
    const int n = j.request.node_rank();
    proto::JoinResponse response = layout_;
    response.set_node_rank(n);
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

void Round::join_async(const proto::JoinRequest& request,
                       std::chrono::system_clock::time_point deadline, Done done) {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty() && closed_) {
      answers.push_back(
          Answer{std::move(done), std::nullopt,
                 Error(ErrorCategory::kConfig, "rendezvous: all " + std::to_string(config_.nnodes) +
                                                   " nodes have already joined; node at " +
                                                   request.host() + " is one too many")});
    } else if (!failure_.empty()) {
      answers.push_back(
          Answer{std::move(done), std::nullopt, Error(ErrorCategory::kConfig, failure_)});
    } else if (std::string why = mismatch(request); !why.empty()) {
      answers.push_back(Answer{std::move(done), std::nullopt,
                               Error(ErrorCategory::kConfig, "rendezvous failed: " + why)});
      fail_locked("rendezvous failed: " + why, &answers);
    } else {
      joined_.push_back(Joined{next_id_++, request, deadline, std::move(done)});
      if (static_cast<int>(joined_.size()) == config_.nnodes) close_locked(&answers);
    }
  }
  deliver(answers);
}

void Round::expire(std::chrono::system_clock::time_point now) {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || !failure_.empty()) return;
    const std::string summary = joined_summary_locked();
    const std::size_t before = joined_.size();
    for (auto it = joined_.begin(); it != joined_.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      answers.push_back(
          Answer{std::move(it->done), std::nullopt,
                 Error(ErrorCategory::kTimeout,
                       "rendezvous: only " + std::to_string(before) + " of " +
                           std::to_string(config_.nnodes) + " nodes joined before the timeout (" +
                           summary + "); start dtrun on the other nodes with the same --rdzv")});
      it = joined_.erase(it);
    }
  }
  deliver(answers);
}

proto::JoinResponse Round::join(const proto::JoinRequest& request,
                                std::chrono::system_clock::time_point deadline) {
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
    expire(std::chrono::system_clock::now());
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

}  // namespace rtd::launcher
