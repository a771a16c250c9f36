// Membership: the job's rounds on the rendezvous server. The first round
// starts the job; a later one forms when a node rejoins (its workers failed
// and restarts are left, or a heartbeat told it to) or a newcomer joins a
// running job (--nnodes=MIN:MAX with room left), or when a node falls silent
// and at least MIN remain. Every member of the running round beats through
// heartbeat(); the answer tells it to rejoin while a new round forms, or that
// the job failed (a node lost, too few left). Free of gRPC, unit-tested.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/round.h"

namespace rtd::launcher {

enum class NodeState { kRunning, kDone, kLeaving };

struct Beat {
  std::string failure;  // the job failed: why
  bool rejoin = false;  // a new round forms: stop the workers and join it
  std::string change;   // with rejoin: why
  std::string refused;  // non-empty: the call does not speak for that node (nothing changed)
  // With rejoin: the round forms only because members were lost (the
  // survivors may keep their workers: in-process recovery).
  bool loss = false;
};

// A job that goes on under a new host (the etcd backend, after the last host
// was lost): its running round as recorded, and its members found gone.
struct ResumeFrom {
  proto::RoundRecord record;
  std::map<std::string, std::string> lost;  // node_id -> how it was found gone
};

class Membership {
 public:
  // job: what every round checks and hands out (its round, previous and
  // rejoin_wait are set per round); a member silent for heartbeat_timeout is lost.
  // resume: the job's running round, which this host takes over: the next
  // round forms at once, without the members lost (or the job fails, as
  // when a node is lost under one host).
  Membership(RoundConfig job, std::chrono::milliseconds heartbeat_timeout,
             SystemTime now = std::chrono::system_clock::now(), const ResumeFrom* resume = nullptr);

  // Joins the forming round, opening one for a running job (see the header
  // comment); refuses a newcomer when the job is full or finishing. An
  // agent's first join is issued a secret (in its layout, the same in every
  // round); a later join naming that node_id must carry it.
  void join_async(const proto::JoinRequest& request, SystemTime deadline, Round::Done done);
  // A member's call arrived: it is alive (now), in this state. A call for a
  // member of the running round whose secret is not that member's changes
  // nothing and is refused (Beat::refused).
  Beat heartbeat(int round, int node_rank, const std::string& secret, NodeState state,
                 SystemTime now);
  // Whether `secret` is a member's of the running round (the agents' store keys).
  bool is_member_secret(const std::string& secret);
  // A member's held heartbeat (arrived at `arrived`) was cancelled: its dtrun
  // exited, was killed, or just changed what it beats for. Unless a newer
  // call comes within kReconnectGrace, the member is lost (tick()) at once,
  // not after the heartbeat timeout.
  void call_closed(int round, int node_rank, SystemTime arrived, SystemTime now);
  static constexpr std::chrono::milliseconds kReconnectGrace{1000};
  // The answer for a call held since it arrived (no sign of life in itself).
  Beat peek(int round, int node_rank);
  // Expires joins, closes rounds on their last call, finds silent members.
  void tick(SystemTime now);
  void cancel(const std::string& why);
  // The running round (round -1 before the first starts), for the etcd backend's record.
  proto::RoundRecord record();
  // The running round's number alone (-1 before the first): whether record()
  // has anything new, without copying the members.
  int running_round();
  // Grows whenever what heartbeat() answers may have changed (a round forms
  // or starts, the job fails): the server then answers the calls it holds.
  long long generation();

 private:
  struct Member {
    Round::Member who;
    SystemTime last_seen;
    NodeState state = NodeState::kRunning;
    bool lost = false;
    std::optional<SystemTime> closed_since;  // its held call was cancelled, no call since
  };
  RoundConfig round_config(int round) const;
  // why: what changes the membership, as the members are told.
  void open_locked(SystemTime now, const std::string& why, bool loss = false);
  void promote_locked(SystemTime now);
  std::string refusal_locked(const proto::JoinRequest& request) const;
  // why: how it was found ("has not been heard from for 31 s (...)").
  void lose_locked(Member& m, SystemTime now, const std::string& why);

  const RoundConfig job_;
  const std::chrono::milliseconds heartbeat_timeout_;
  std::mutex mu_;
  int running_ = -1;                // the round whose workers run (-1: none yet)
  std::vector<Member> members_;     // of round running_, by node rank
  std::unique_ptr<Round> forming_;  // the next round, while it forms
  std::string failure_;
  std::string change_;        // why the forming round forms
  bool change_loss_ = false;  // ... only because members were lost
  long long generation_ = 0;
  std::map<std::string, std::string>
      secrets_;  // node_id -> secret, of every agent that was a member
};

}  // namespace rtd::launcher
