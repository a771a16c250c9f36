// Round: one rendezvous round on the server. Collects nnodes joins, checks that
// every agent runs the same configuration, assigns node ranks and hands every
// agent the same world layout. Free of gRPC so that it is unit-tested directly.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous.pb.h"

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
  explicit Round(RoundConfig config) : config_(std::move(config)) {}

  // Blocks until the round closes, fails, or deadline passes. Thread-safe.
  // Throws rtd::Error: kConfig when this or another agent disagrees (every
  // waiting agent gets the same error), kTimeout naming who joined.
  proto::JoinResponse join(const proto::JoinRequest& request,
                           std::chrono::system_clock::time_point deadline);
  void cancel(const std::string& why);

 private:
  std::string mismatch(const proto::JoinRequest& request) const;
  void close_locked();
  std::string joined_summary_locked() const;

  const RoundConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Joined {
    int id;
    proto::JoinRequest request;
  };
  std::vector<Joined> joined_;
  int next_id_ = 0;
  bool closed_ = false;
  std::string failure_;
  proto::JoinResponse layout_;
};

}  // namespace rtd::launcher
