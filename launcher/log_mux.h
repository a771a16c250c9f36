// LogMux: reads every worker's stdout and stderr pipes on one thread and writes
// each line to dtrun's own stdout/stderr prefixed with "[rank N]: ", and, with
// --log-dir, unprefixed to that rank's file.
#pragma once

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace rtd::launcher {

class LogMux {
 public:
  ~LogMux();
  // Before start(): read fd (closed at EOF), prefix its lines, write them to out
  // (unless nullptr) and, if log_fd >= 0, to log_fd (owned by the mux).
  void add(int fd, std::string prefix, std::FILE* out, int log_fd);
  void start();
  // Returns when every added fd reached EOF.
  void join();

 private:
  struct Stream {
    int fd;
    std::string prefix;
    std::FILE* out;
    int log_fd;
    std::string partial;
  };
  void run();
  void emit(Stream& s, const char* data, std::size_t len);
  void flush_partial(Stream& s);

  std::vector<Stream> streams_;
  std::thread thread_;
};

}  // namespace rtd::launcher
