// Supervisor: fork/exec of workers and the watch loop.
#include "launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "launcher/signals.h"
#include "launcher/write_all.h"
#include "rt_dist/error.h"
#include "runtime/core/check.h"
#include "runtime/core/log.h"

namespace rtd::launcher {
namespace {

constexpr std::chrono::milliseconds kSettle{200};
// With in-process recovery the survivors do not exit: the wait only gathers
// workers that died together (a node's, killed at once) into one generation.
constexpr std::chrono::milliseconds kSettleReplace{30};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with code " + std::to_string(exit_code_of(status));
}

int open_log(const SupervisorOptions& o, int rank) {
  if (o.log_dir.empty()) return -1;
  std::string dir = o.log_dir + "/attempt_" + std::to_string(o.attempt);
  mkdir(o.log_dir.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::string file = dir + "/rank_" + std::to_string(rank) + ".log";
  int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(ErrorCategory::kConfig, "cannot write worker log " + file + ": " +
                                            std::strerror(errno) + " (check --log-dir)");
  }
  return fd;
}

}  // namespace

std::string resolve_program(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program)) return program;
    throw Error(
        ErrorCategory::kConfig,
        "cannot run '" + program + "': " +
            (access(program.c_str(), F_OK) == 0 ? "not an executable file" : "no such file"));
  }
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
  }
  throw Error(
      ErrorCategory::kConfig,
      "cannot run '" + program + "': not found on PATH (give a path such as ./" + program + ")");
}

Supervisor::~Supervisor() {
  if (any_running()) stop_all(SIGTERM);
  join_output();
}

void Supervisor::join_output() {
  mux_.join();
  for (auto& m : late_mux_) m->join();
}

void Supervisor::spawn(const WorkerSpec& spec, LogMux& mux, bool spare) {
  int out[2], err[2], fail[2], control[2] = {-1, -1};
  RTD_SYS_CHECK(pipe2(out, O_CLOEXEC), "pipe");
  RTD_SYS_CHECK(pipe2(err, O_CLOEXEC), "pipe");
  RTD_SYS_CHECK(pipe2(fail, O_CLOEXEC), "pipe");
  if (spare)
    RTD_SYS_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control), "socketpair");
  int log_fd = spare ? -1 : open_log(options_, spec.global_rank);

  std::vector<std::string> argv_s{options_.program_path};
  if (spare) argv_s.insert(argv_s.end(), {"-m", "rt_dist.spare"});
  argv_s.insert(argv_s.end(), options_.args.begin(), options_.args.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_copy = spec.env;
  // What the worker starts carries the guard's tag: found however it leaves (orphan_guard.h).
  if (options_.guard) env_copy.emplace_back(options_.guard->tag_entry());
  // The spare's end of its socket stays open across exec, where it names it.
  if (spare) env_copy.emplace_back("DTRUN_SPARE_FD=" + std::to_string(control[1]));
  for (auto& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t parent = getpid();
  // In-process recovery tells workers of a move by SIGUSR1, whose default
  // action ends the process: a worker still starting (a replacement, say)
  // ignores it until its trainer installs its handler (rtd::Recovery). An
  // ignored signal stays ignored across exec; a handler does not.
  const bool ignore_move_signal = static_cast<bool>(options_.replace);
  pid_t pid = RTD_SYS_CHECK(fork(), "fork");
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    if (ignore_move_signal) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigaction(SIGUSR1, &ignore, nullptr);
    }
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a worker never outlives a killed dtrun
    if (getppid() != parent) _exit(127);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    if (spare) fcntl(control[1], F_SETFD, 0);
    execve(argv[0], argv.data(), envp.data());
    int e = errno;
    ssize_t ignored = write(fail[1], &e, sizeof(e));
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so that the group exists before any kill
  if (options_.guard) options_.guard->watch(pid);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  close(out[1]);
  close(err[1]);
  close(fail[1]);
  if (spare) close(control[1]);
  int exec_errno = 0;
  ssize_t got = read(fail[0], &exec_errno, sizeof(exec_errno));
  close(fail[0]);
  children_.push_back(Child{.pid = pid,
                            .rank = spec.global_rank,
                            .local_rank = spec.local_rank,
                            .spare = spare,
                            .control = control[0],
                            .running = true,
                            .pidfd = pidfd});
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    close(out[0]);
    close(err[0]);
    if (log_fd >= 0) close(log_fd);
    throw Error(ErrorCategory::kConfig,
                "cannot start '" + options_.program_path + "' for " +
                    (spare ? std::string("a spare") : "rank " + std::to_string(spec.global_rank)) +
                    ": " + std::strerror(exec_errno));
  }
  if (spare) {
    // A spare's own output (a failure to import, say) until it becomes a worker.
    mux.add(out[0], "[spare]: ", stdout, -1);
    mux.add(err[0], "[spare]: ", stderr, -1);
    return;
  }
  attach_output(out[0], err[0], log_fd, spec, mux);
}

void Supervisor::attach_output(int out, int err, int log_fd, const WorkerSpec& spec, LogMux& mux) {
  std::string prefix = "[rank " + std::to_string(spec.global_rank) + "]: ";
  const auto& shown = options_.console_local_ranks;
  const bool console =
      shown.empty() || std::find(shown.begin(), shown.end(), spec.local_rank) != shown.end();
  mux.add(out, prefix, console && options_.console_stdout ? stdout : nullptr, log_fd);
  mux.add(err, prefix, console && options_.console_stderr ? stderr : nullptr,
          log_fd >= 0 ? dup(log_fd) : -1);
}

void Supervisor::add_spares(LogMux& mux) {
  int idle = 0;
  for (const auto& c : children_) idle += c.spare && c.running && c.control >= 0;
  for (; idle < options_.spares; ++idle) {
    try {
      spawn(WorkerSpec{.global_rank = -1, .local_rank = -1, .env = options_.spare_env()}, mux,
            true);
    } catch (const Error& e) {
      log::get("launcher")->warn("could not start a spare worker: {}", e.what());
      return;
    }
  }
}

namespace {
// python/rt_dist/spare.py reads it: "RTDS", the environment's length (u32,
// little endian) carrying the worker's stdout and stderr, then the
// environment as KEY=VALUE\0 entries.
bool send_activation(int control, int out, int err, const std::string& env) {
  char head[8] = {'R', 'T', 'D', 'S'};
  const auto len = static_cast<std::uint32_t>(env.size());
  for (int i = 0; i < 4; ++i) head[4 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
  iovec iov{head, sizeof(head)};
  alignas(cmsghdr) char space[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = space;
  msg.msg_controllen = sizeof(space);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {out, err};
  std::memcpy(CMSG_DATA(cm), fds, sizeof(fds));
  ssize_t n;
  do {
    n = sendmsg(control, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(head)) && write_all(control, env.data(), env.size());
}
}  // namespace

bool Supervisor::spare_ready(Child& c, std::chrono::steady_clock::time_point until) {
  if (!c.ready && c.control >= 0) {
    // Readable: its byte, or the end of its socket (it died).
    pollfd p{c.control, POLLIN, 0};
    auto left = [&] {
      return static_cast<int>(std::max<std::int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(until -
                                                                   std::chrono::steady_clock::now())
                 .count()));
    };
    while (poll(&p, 1, left()) < 0 && errno == EINTR) {
    }
    char said = 0;
    ssize_t n;
    do {
      n = recv(c.control, &said, 1, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    c.ready = n == 1 && said == 'R';
  }
  return c.ready;
}

bool Supervisor::activate(std::size_t i, const WorkerSpec& spec, LogMux& mux) {
  int out[2], err[2];
  RTD_SYS_CHECK(pipe2(out, O_CLOEXEC), "pipe");
  RTD_SYS_CHECK(pipe2(err, O_CLOEXEC), "pipe");
  int log_fd = -1;
  try {
    log_fd = open_log(options_, spec.global_rank);
  } catch (...) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    throw;
  }
  std::string env;
  for (const std::string& e : spec.env) env.append(e).push_back('\0');
  if (options_.guard) env.append(options_.guard->tag_entry()).push_back('\0');
  Child& c = children_[i];
  const bool told = send_activation(c.control, out[1], err[1], env);
  close(out[1]);
  close(err[1]);
  close(c.control);
  c.control = -1;
  if (!told) {  // it died meanwhile: it is reaped as a spare that ended
    for (int fd : {out[0], err[0], log_fd})
      if (fd >= 0) close(fd);
    kill(-c.pid, SIGKILL);
    return false;
  }
  c.spare = false;
  c.rank = spec.global_rank;
  c.local_rank = spec.local_rank;
  attach_output(out[0], err[0], log_fd, spec, mux);
  log::get("launcher")
      ->info("worker rank {} is a spare made into it (pid {}), not a process started anew",
             spec.global_rank, c.pid);
  return true;
}

void Supervisor::start(const std::vector<WorkerSpec>& workers) {
  try {
    for (const auto& w : workers) spawn(w, mux_);
    if (options_.replace) add_spares(mux_);
  } catch (...) {
    stop_all(SIGKILL);
    mux_.start();
    throw;
  }
  mux_.start();
}

int Supervisor::reap(bool block) {
  int reaped = 0;
  const int batch = ++batches_;
  for (auto& c : children_) {
    if (!c.running) continue;
    int status = 0;
    pid_t r = waitpid(c.pid, &status, block ? 0 : WNOHANG);
    if (r == c.pid) {
      c.running = false;
      c.status = status;
      c.batch = batch;
      c.ended = std::chrono::steady_clock::now();
      c.ended_wall = std::chrono::system_clock::now();
      if (c.pidfd >= 0) close(c.pidfd);
      c.pidfd = -1;
      if (c.spare) {
        if (c.control >= 0) close(c.control);
        c.control = -1;
        if (!stopping_)
          log::get("launcher")
              ->warn(
                  "a spare worker (pid {}) {} before it was needed (its output says why); "
                  "failed workers are started anew",
                  c.pid, describe(status));
      }
      ++reaped;
    }
  }
  return reaped;
}

void Supervisor::wait_for_exit(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  for (const auto& c : children_) {
    if (c.running && c.pidfd >= 0) fds.push_back(pollfd{c.pidfd, POLLIN, 0});
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);
    return;
  }
  poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
}

namespace {
// 0: the likeliest first cause of a failure seen together with others.
int consequence_rank(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return sig == SIGABRT || sig == SIGTERM ? 2 : 0;
  }
  return 1;
}
}  // namespace

const Supervisor::Child* Supervisor::first_failure() const {
  const Child* first = nullptr;
  for (const auto& c : children_) {
    if (c.spare || c.running || c.replaced || exit_code_of(c.status) == 0) continue;
    if (!first || c.batch < first->batch ||
        (c.batch == first->batch && consequence_rank(c.status) < consequence_rank(first->status)))
      first = &c;
  }
  return first;
}

Outcome Supervisor::failure_outcome(const Child& first,
                                    std::chrono::steady_clock::time_point stop) const {
  Outcome out{Ending::kWorkerFailed, exit_code_of(first.status), first.rank,
              "worker rank " + std::to_string(first.rank) + " " + describe(first.status)};
  out.failed_at = first.ended_wall;
  // Workers that failed after it, before anything was stopped: most likely
  // its consequences (a peer's collective aborting), so they come after it.
  std::vector<const Child*> then;
  for (const auto& c : children_) {
    if (&c != &first && !c.spare && !c.running && !c.replaced && exit_code_of(c.status) != 0 &&
        c.ended <= stop)
      then.push_back(&c);
  }
  std::sort(then.begin(), then.end(),
            [](const Child* a, const Child* b) { return a->ended < b->ended; });
  for (const Child* c : then) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(c->ended - first.ended).count();
    out.reason += "; then rank " + std::to_string(c->rank) + " " + describe(c->status) +
                  (c->batch == first.batch ? " (seen at the same time)"
                                           : " (" + std::to_string(ms) + " ms later)");
  }
  return out;
}

bool Supervisor::any_running() const {
  for (const auto& c : children_) {
    if (c.running) return true;
  }
  return false;
}

bool Supervisor::any_worker_running() const {
  for (const auto& c : children_) {
    if (c.running && !c.spare) return true;
  }
  return false;
}

void Supervisor::signal_workers(int sig) {
  for (const auto& c : children_) {
    if (c.running && !c.spare) kill(c.pid, sig);
  }
}

void Supervisor::renumber(int first_rank) {
  for (auto& c : children_) {
    if (!c.spare) c.rank = first_rank + c.local_rank;
  }
}

bool Supervisor::replace_failed() {
  std::vector<Child*> failed;
  std::vector<int> local_ranks;
  for (auto& c : children_) {
    if (c.running || c.replaced || exit_code_of(c.status) == 0) continue;
    failed.push_back(&c);
    local_ranks.push_back(c.local_rank);
  }
  if (failed.empty()) return false;
  const std::string why =
      failure_outcome(*first_failure(), std::chrono::steady_clock::now()).reason;
  std::optional<std::vector<WorkerSpec>> specs = options_.replace(local_ranks, why);
  if (!specs) return false;
  for (Child* c : failed) {
    c->replaced = true;
    if (options_.guard) options_.guard->forget(c->pid);
  }
  auto mux = std::make_unique<LogMux>();
  // One wait for spares still importing, however many workers and spares.
  const auto spares_until = std::chrono::steady_clock::now() + kSpareReadyWait;
  try {
    for (const WorkerSpec& spec : *specs) {
      bool made = false;
      for (std::size_t i = 0; i < children_.size() && !made; ++i) {
        Child& c = children_[i];
        made = c.spare && c.running && c.control >= 0 && spare_ready(c, spares_until) &&
               activate(i, spec, *mux);
      }
      if (!made) spawn(spec, *mux);
    }
    add_spares(*mux);
  } catch (...) {
    mux->start();
    late_mux_.push_back(std::move(mux));
    throw;
  }
  mux->start();
  late_mux_.push_back(std::move(mux));
  return true;
}

void Supervisor::stop_all(int sig) {
  stopping_ = true;
  for (const auto& c : children_) {
    if (!c.running) continue;
    kill(-c.pid, sig);
    // A stopped worker would sit out the grace period and get only SIGKILL:
    // it is woken so that it can handle the signal.
    kill(-c.pid, SIGCONT);
  }
  auto deadline = std::chrono::steady_clock::now() + options_.grace_period;
  int again = 0;  // a Ctrl-C or SIGTERM during the grace period ends it at once
  while (any_running() && std::chrono::steady_clock::now() < deadline &&
         (again = take_pending_signal()) == 0) {
    reap(false);
    wait_for_exit(std::chrono::milliseconds(20));
  }
  reap(false);
  if (any_running()) {
    if (again) {
      log::get("launcher")->warn("received {} again; killing the workers now", strsignal(again));
    } else {
      log::get("launcher")
          ->warn("workers still running {} s after signal {}; sending SIGKILL",
                 options_.grace_period.count(), sig);
    }
    for (const auto& c : children_) {
      if (c.running) kill(-c.pid, SIGKILL);
    }
    while (any_running()) reap(true);
  }
  // Whatever the workers left in their process groups goes too.
  kill_groups();
}

void Supervisor::kill_groups() {
  stopping_ = true;
  for (const auto& c : children_) {
    kill(-c.pid, SIGKILL);
    kill(-c.pid, SIGCONT);
    if (options_.guard) options_.guard->forget(c.pid);
  }
}

Outcome Supervisor::watch(const StopCheck& stop_check, std::chrono::milliseconds poll_every) {
  auto logger = log::get("launcher");
  auto next_check = std::chrono::steady_clock::now() + poll_every;
  for (;;) {
    reap(false);
    if (first_failure()) {
      // A moment for the failures it causes (peers aborting their collectives)
      // to show, so that they are reported as its consequences, not as causes.
      const auto wait = options_.replace ? kSettleReplace : kSettle;
      const auto settle = std::chrono::steady_clock::now() + wait;
      while (any_running() && std::chrono::steady_clock::now() < settle) {
        wait_for_exit(wait / 10);
        reap(false);
      }
      if (options_.replace && replace_failed()) continue;
      Outcome out = failure_outcome(*first_failure(), std::chrono::steady_clock::now());
      logger->error("{}; stopping the other workers", out.reason);
      stop_all(SIGTERM);
      join_output();
      return out;
    }
    if (!any_worker_running()) {
      // Whatever a worker left running in its process group would hold the
      // output pipes open; the job is over, so it goes too, with the spares.
      kill_groups();
      while (any_running()) reap(true);
      join_output();
      return Outcome{};
    }
    if (int sig = take_pending_signal()) {
      logger->warn("received signal {} ({}); forwarding it to the workers", sig, strsignal(sig));
      if (options_.on_signal) options_.on_signal(sig);
      stop_all(sig);
      join_output();
      return Outcome{Ending::kSignal, 128 + sig, -1,
                     std::string("dtrun received ") + strsignal(sig)};
    }
    if (stop_check && std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + poll_every;
      if (std::optional<Outcome> stop = stop_check()) {
        if (stop->keep_workers) {
          logger->info("{}; the workers keep running (in-process recovery)", stop->reason);
          stop->ending = Ending::kStopRequested;
          return *stop;
        }
        if (stop->rejoin)
          logger->info("{}; stopping this node's workers", stop->reason);
        else
          logger->error("{}; stopping this node's workers", stop->reason);
        stop_all(SIGTERM);
        join_output();
        stop->ending = Ending::kStopRequested;
        return *stop;
      }
    }
    wait_for_exit(std::chrono::milliseconds(20));
  }
}

}  // namespace rtd::launcher
