// Round: one rendezvous round on the server. Collects the joins, checks that
// every agent runs the same configuration, assigns node ranks and hands every
// agent its part of the world layout. Free of gRPC so that it is unit-tested
// directly; Membership (membership.h) chains rounds into a job.
//
// A round closes when max_nodes agents joined; with a range (min < max),
// also once min joined and the last call passed without a new one. A round
// that re-forms a running job (`previous` not empty) closes as soon as every
// previous member is back (newcomers with them, up to max), or after
// rejoin_wait with those back if they are at least min.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "rendezvous.pb.h"
#include "rt_dist/error.h"

namespace rtd::launcher {

using SystemTime = std::chrono::system_clock::time_point;

struct RoundConfig {
  int round = 0;
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  std::string fingerprint;
  int master_port = 0;
  std::string run_id;
  std::map<std::string, int> previous;  // node_id -> node rank in the round before
  std::chrono::milliseconds last_call{0};
  std::chrono::milliseconds rejoin_wait{30000};
  std::string host_node_id;  // the hosting agent's: node rank 0 is its alone (empty: anyone's)
};

// "--nnodes=N" or "--nnodes=MIN:MAX", as the user typed it.
std::string nnodes_flag(int min_nodes, int max_nodes);

class Round {
 public:
  // An agent's answer: its layout, or the error that ended its wait.
  using Done = std::function<void(const proto::JoinResponse*, const Error*)>;
  struct Member {
    std::string node_id;
    std::string host;
    int node_rank = 0;
    std::string secret;  // the request's agent_secret (Membership puts the issued one there)
  };

  explicit Round(RoundConfig config, SystemTime opened = std::chrono::system_clock::now());

  // Returns at once; done runs exactly once, on some thread, when the round
  // closes (with this agent's layout), is refused (kConfig: this agent
  // disagrees with the host's configuration, asks for a rank that is taken
  // or that the closing round cannot hold: it alone is turned away), the
  // round fails (cancelled, or too few came back to a re-formed round), or
  // when tick() finds its deadline passed (kTimeout naming who joined and
  // who was refused). The request is well formed (request_checks.h).
  // Thread-safe. No thread waits for an agent: a server holds thousands of
  // joins this way.
  void join_async(const proto::JoinRequest& request, SystemTime deadline, Done done);
  // Fails the joins whose deadline passed and closes the round when its last
  // call or its rejoin wait is over (the server calls it periodically).
  void tick(SystemTime now);
  // join_async, waited for (ticking): returns the layout or throws the error.
  proto::JoinResponse join(const proto::JoinRequest& request, SystemTime deadline);
  void cancel(const std::string& why);
  // A previous member that will not come back (lost): the round stops waiting for it.
  void forget(const std::string& node_id);

  bool closed();
  std::string failure();          // empty unless the round failed
  std::vector<Member> members();  // once closed, by node rank
  bool has_joined(const std::string& node_id);

 private:
  struct Joined {
    proto::JoinRequest request;
    SystemTime deadline;
    Done done;
  };
  // The callbacks to run, with what to pass, once the lock is released.
  struct Answer {
    Done done;
    std::optional<proto::JoinResponse> layout;
    std::optional<Error> error;
  };
  std::string mismatch(const proto::JoinRequest& request) const;
  bool complete_locked() const;
  bool try_close_locked(std::vector<Answer>* answers);
  void note_refusal_locked(const std::string& why);
  void close_locked(std::vector<Answer>* answers);
  void fail_locked(const std::string& why, std::vector<Answer>* answers);
  std::string joined_summary_locked() const;
  static void deliver(std::vector<Answer>& answers);

  RoundConfig config_;
  const SystemTime opened_;
  std::mutex mu_;
  std::vector<Joined> joined_;  // waiting, in arrival order (all of them once closed)
  std::unordered_set<std::string> joined_ids_;
  std::size_t previous_back_ = 0;  // members of config_.previous among them
  SystemTime last_join_{};
  bool closed_ = false;
  std::string failure_;
  std::vector<Member> members_;
  std::vector<std::string> refused_;  // the last few joins turned away, for the timeout's message
};

}  // namespace rtd::launcher
