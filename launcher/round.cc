// The Join protocol of one rendezvous round (docs/rendezvous.md, "Round").
#include "launcher/round.h"

#include <algorithm>

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
  for (const auto& [id, other] : joined_) {
    if (r.node_rank() >= 0 && other.node_rank() == r.node_rank()) {
      return "nodes at " + other.host() + " and " + r.host() +
             " both asked for --node-rank=" + std::to_string(r.node_rank());
    }
  }
  return "";
}

void Round::close_locked() {
  std::vector<bool> taken(config_.nnodes, false);
  for (const auto& [id, j] : joined_) {
    if (j.node_rank() >= 0) taken[j.node_rank()] = true;
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
  std::vector<proto::JoinRequest> by_rank(config_.nnodes);
  for (const auto& [id, j] : joined_) by_rank[j.node_rank()] = j;
  layout_.set_world_size(config_.nnodes * config_.nproc_per_node);
  layout_.set_master_addr(by_rank[0].host());
  layout_.set_master_port(config_.master_port);
  layout_.set_run_id(config_.run_id);
  layout_.set_round(0);
  for (int n = 0; n < config_.nnodes; ++n) {
    auto* node = layout_.add_nodes();
    node->set_host(by_rank[n].host());
    node->set_node_rank(n);
    node->set_nproc(config_.nproc_per_node);
    node->set_first_rank(n * config_.nproc_per_node);
  }
  closed_ = true;
}

std::string Round::joined_summary_locked() const {
  std::string out;
  for (const auto& [id, j] : joined_) out += (out.empty() ? "" : ", ") + j.host();
  return out.empty() ? "none" : out;
}

proto::JoinResponse Round::join(const proto::JoinRequest& request,
                                std::chrono::system_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failure_.empty() && closed_) {
    throw Error(ErrorCategory::kConfig, "rendezvous: all " + std::to_string(config_.nnodes) +
                                            " nodes have already joined; node at " +
                                            request.host() + " is one too many");
  }
  if (failure_.empty()) {
    std::string why = mismatch(request);
    if (!why.empty()) {
      failure_ = "rendezvous failed: " + why;
      cv_.notify_all();
    }
  }
  if (!failure_.empty()) throw Error(ErrorCategory::kConfig, failure_);
  const int id = next_id_++;
  joined_.push_back(Joined{id, request});
  auto mine = [&] {
    return std::find_if(joined_.begin(), joined_.end(),
                        [&](const Joined& j) { return j.id == id; });
  };
  if (static_cast<int>(joined_.size()) == config_.nnodes) {
    close_locked();
    cv_.notify_all();
  }
  bool finished = cv_.wait_until(lock, deadline, [&] { return closed_ || !failure_.empty(); });
  if (!failure_.empty()) throw Error(ErrorCategory::kConfig, failure_);
  if (!finished) {
    std::string summary = joined_summary_locked();
    joined_.erase(mine());
    throw Error(ErrorCategory::kTimeout,
                "rendezvous: only " + std::to_string(joined_.size() + 1) + " of " +
                    std::to_string(config_.nnodes) + " nodes joined before the timeout (" +
                    summary + "); start dtrun on the other nodes with the same --rdzv");
  }
  proto::JoinResponse response = layout_;
  response.set_node_rank(mine()->request.node_rank());
  return response;
}

void Round::cancel(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_ && failure_.empty()) failure_ = "rendezvous cancelled: " + why;
  cv_.notify_all();
}

}  // namespace rtd::launcher
