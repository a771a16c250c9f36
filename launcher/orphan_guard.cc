// The guard process (orphan_guard.h). After fork only async-signal-safe calls
// and no allocation: dtrun may already run threads.
#include "launcher/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "launcher/net.h"

namespace rtd::launcher {
namespace {

constexpr int kMaxGroups = 4096;

// Whether the NUL-separated environment in fd holds the entry `entry`
// (NUL-terminated). Read in pieces, with no allocation.
bool environ_holds(int fd, const char* entry) {
  const std::size_t n = std::strlen(entry);
  char buf[4096 + 256];
  std::size_t kept = 0;  // carried over from the last piece: a partial entry
  bool at_start = true;  // kept begins an entry
  for (;;) {
    const ssize_t got = read(fd, buf + kept, sizeof(buf) - kept);
    if (got < 0 && errno == EINTR) continue;
    const std::size_t len = kept + (got > 0 ? static_cast<std::size_t>(got) : 0);
    std::size_t begin = 0;
    bool start = at_start;
    for (std::size_t i = 0; i < len; ++i) {
      if (buf[i] != '\0') continue;
      if (start && i - begin == n && std::memcmp(buf + begin, entry, n) == 0) return true;
      begin = i + 1;
      start = true;
    }
    if (got <= 0) return start && len - begin == n && std::memcmp(buf + begin, entry, n) == 0;
    // The unfinished entry goes to the front; one longer than ours cannot match.
    if (len - begin > n) {
      kept = 0;
      at_start = false;
    } else {
      std::memmove(buf, buf + begin, len - begin);
      kept = len - begin;
      at_start = start;
    }
  }
}

// Kills every process (but this one) whose environment holds `entry`:
// descendants of the workers that left their process groups (setsid) or
// were orphaned (a double fork) still carry it. Returns how many.
int kill_tagged(const char* entry) {
  const int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc < 0) return 0;
  const pid_t self = getpid();
  int killed = 0;
  alignas(8) char dents[8192];
  for (;;) {
    const long got = syscall(SYS_getdents64, proc, dents, sizeof(dents));
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      struct Dirent64 {
        std::uint64_t ino;
        std::int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* d = reinterpret_cast<const Dirent64*>(dents + at);
      at += d->reclen;
      pid_t pid = 0;
      const char* c = d->name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 1 || pid == self) continue;
      char path[40] = "/proc/";
      char* p = path + 6;
      for (const char* q = d->name; *q != '\0' && p < path + 30; ++q) *p++ = *q;
      std::memcpy(p, "/environ", 9);
      const int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // gone, or another user's
      const bool tagged = environ_holds(fd, entry);
      close(fd);
      if (!tagged) continue;
      kill(pid, SIGKILL);
      kill(pid, SIGCONT);
      ++killed;
    }
  }
  close(proc);
  return killed;
}

[[noreturn]] void guard_main(int fd, const char* tag_entry) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU})
    sigaction(sig, &ignore, nullptr);
  setsid();
  prctl(PR_SET_NAME, "dtrun-guard", 0, 0, 0);
  const int devnull = open("/dev/null", O_RDWR);
  for (int std_fd = 0; std_fd < 3; ++std_fd) {
    if (devnull >= 0) dup2(devnull, std_fd);
  }
  for (int other = 3; other < 1024; ++other) {
    if (other != fd) close(other);
  }
  pid_t groups[kMaxGroups];
  int count = 0;
  for (;;) {
    std::int32_t message = 0;
    const ssize_t got = read(fd, &message, sizeof(message));
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof(message))) break;  // dtrun is gone
    if (message > 0 && count < kMaxGroups) {
      groups[count++] = message;
    } else if (message < 0) {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -message) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) {
    kill(-groups[i], SIGKILL);
    kill(-groups[i], SIGCONT);
  }
  // Then what escaped the groups; again while a pass finds some (one may
  // have forked meanwhile).
  for (int pass = 0; pass < 5 && kill_tagged(tag_entry) > 0; ++pass) usleep(20000);
  _exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  // The tag every worker's environment carries: random, so that two dtruns
  // on one host never take each other's processes. Made before the fork:
  // the guard only reads it.
  tag_entry_ = std::string(kTagVariable) + "=" + random_token();
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    close(fds[0]);
    guard_main(fds[1], tag_entry_.c_str());
  }
  close(fds[1]);
  fd_ = fds[0];
  pid_ = pid;
}

OrphanGuard::~OrphanGuard() {
  if (fd_ < 0) return;
  close(fd_);  // the guard kills what is left (nothing, when dtrun stopped it all) and exits
  waitpid(pid_, nullptr, 0);
}

void OrphanGuard::send(int value) {
  if (fd_ < 0) return;
  const std::int32_t message = value;
  // A guard that died is not worth failing the job for: MSG_NOSIGNAL, no check.
  [[maybe_unused]] const ssize_t sent = ::send(fd_, &message, sizeof(message), MSG_NOSIGNAL);
}

void OrphanGuard::watch(pid_t group) { send(group); }
void OrphanGuard::forget(pid_t group) { send(-group); }

}  // namespace rtd::launcher
