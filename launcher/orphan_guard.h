// OrphanGuard: nothing a worker started outlives a dtrun killed by SIGKILL.
// The parent-death signal reaches only the workers themselves; what they
// started (`sh -c 'sleep 300; ./train'`) stays in their process groups. A
// small guard process, forked before anything else runs, learns each worker's
// process group over a socket; when the socket closes (dtrun exited, however
// it died) it kills the groups it still holds and exits. It sits in its own
// session, so that signals to dtrun's group do not reach it. A descendant
// that left its worker's process group (setsid) or was orphaned (a double
// fork) is found all the same: every worker's environment carries the
// guard's random tag (DTRUN_GUARD=<tag>, inherited by what it starts), and
// the guard kills every process whose environment holds it.
#pragma once

#include <sys/types.h>

#include <string>

namespace rtd::launcher {

class OrphanGuard {
 public:
  // Forks the guard; without one (fork failed), watch() and forget() do nothing.
  OrphanGuard();
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // A worker's process group, to kill if dtrun dies.
  void watch(pid_t group);
  // A group that dtrun itself has killed (its id may be reused).
  void forget(pid_t group);
  pid_t pid() const { return pid_; }
  // "DTRUN_GUARD=<tag>": the entry each worker's environment gets.
  const std::string& tag_entry() const { return tag_entry_; }

  static constexpr const char* kTagVariable = "DTRUN_GUARD";

 private:
  void send(int value);
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string tag_entry_;
};

}  // namespace rtd::launcher
