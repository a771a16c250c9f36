// Round: one rendezvous round on the server. Collects nnodes joins, checks that
// every agent runs the same configuration, assigns node ranks and hands every
// agent the same world layout. Free of gRPC so that it is unit-tested directly.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous.pb.h"
#include "rt_dist/error.h"

namespace rtd::launcher {

struct RoundConfig {
  int nnodes = 1;
  int nproc_per_node = 1;
  std::string fingerprint;
  int master_port = 0;
  std::string run_id;
};

class Round {
 public:
  // An agent's answer: its layout, or the error that ended its wait.
  using Done = std::function<void(const proto::JoinResponse*, const Error*)>;

  explicit Round(RoundConfig config) : config_(std::move(config)) {}

  // Returns at once; done runs exactly once, on some thread, when the round
  // closes (every agent's layout), fails (kConfig: this or another agent
  // disagrees; every waiting agent gets the same error), or when expire()
  // finds deadline passed (kTimeout naming who joined). Thread-safe. No thread
  // waits for an agent: a server holds thousands of joins this way.
  void join_async(const proto::JoinRequest& request, std::chrono::system_clock::time_point deadline,
                  Done done);
  // Fails the joins whose deadline is before now (the server calls it
  // periodically).
  void expire(std::chrono::system_clock::time_point now);
  // join_async, waited for: returns the layout or throws the error.
  proto::JoinResponse join(const proto::JoinRequest& request,
                           std::chrono::system_clock::time_point deadline);
  void cancel(const std::string& why);

 private:
  struct Joined {
    int id;
    proto::JoinRequest request;
    std::chrono::system_clock::time_point deadline;
    Done done;
  };
  // The callbacks to run, with what to pass, once the lock is released.
  struct Answer {
    Done done;
    std::optional<proto::JoinResponse> layout;
    std::optional<Error> error;
  };
  std::string mismatch(const proto::JoinRequest& request) const;
  void close_locked(std::vector<Answer>* answers);
  void fail_locked(const std::string& why, std::vector<Answer>* answers);
  std::string joined_summary_locked() const;
  static void deliver(std::vector<Answer>& answers);

  const RoundConfig config_;
  std::mutex mu_;
  std::vector<Joined> joined_;  // waiting, in arrival order (all of them once closed)
  int next_id_ = 0;
  bool closed_ = false;
  std::string failure_;
  proto::JoinResponse layout_;
};

}  // namespace rtd::launcher
