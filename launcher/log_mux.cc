// LogMux: poll(2) over the worker pipes; whole lines are written at once, to
// the terminal and to the log files, so that lines never interleave mid-line.
#include "launcher/log_mux.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "launcher/write_all.h"

namespace rtd::launcher {
namespace {
std::mutex g_out_mu;  // dtrun's own stdout/stderr are shared by all streams
}

LogMux::~LogMux() { join(); }

void LogMux::add(int fd, std::string prefix, std::FILE* out, int log_fd) {
  streams_.push_back(Stream{fd, std::move(prefix), out, log_fd, {}});
}

void LogMux::start() {
  thread_ = std::thread([this] { run(); });
}

void LogMux::join() {
  if (thread_.joinable()) thread_.join();
}

void LogMux::emit(Stream& s, const char* data, std::size_t len) {
  s.partial.append(data, len);
  std::size_t start = 0;
  for (;;) {
    std::size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    // Whole lines, to the file as to the terminal: a rank's stdout and stderr
    // share its file, and a line of one must not split a line of the other.
    if (s.log_fd >= 0) write_all(s.log_fd, s.partial.data() + start, nl - start + 1);
    std::string line = s.prefix + s.partial.substr(start, nl - start + 1);
    if (s.out != nullptr) {
      std::lock_guard<std::mutex> lock(g_out_mu);
      std::fwrite(line.data(), 1, line.size(), s.out);
      std::fflush(s.out);
    }
    start = nl + 1;
  }
  s.partial.erase(0, start);
}

void LogMux::flush_partial(Stream& s) {
  if (!s.partial.empty()) {
    s.partial += '\n';
    emit(s, "", 0);
  }
  if (s.log_fd >= 0) close(s.log_fd);
  close(s.fd);
  s.fd = -1;
}

void LogMux::run() {
  char buf[65536];
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;
    for (auto& s : streams_) {
      if (s.fd < 0) continue;
      fds.push_back(pollfd{s.fd, POLLIN, 0});
      owners.push_back(&s);
    }
    if (fds.empty()) return;
    int rc = poll(fds.data(), fds.size(), 1000);
    if (rc < 0 && errno != EINTR) return;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        emit(*owners[i], buf, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        flush_partial(*owners[i]);
      }
    }
  }
}

}  // namespace rtd::launcher
