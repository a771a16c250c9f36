// The guard process (orphan_guard.h). After fork only async-signal-safe calls
// and no allocation: dtrun may already run threads.
#include "launcher/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <initializer_list>

namespace rtd::launcher {
namespace {

constexpr int kMaxGroups = 4096;

[[noreturn]] void guard_main(int fd) {
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
  _exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
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
    guard_main(fds[1]);
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
