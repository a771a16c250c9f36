// Writes all of data to fd (a pipe, a file, a socket), again after EINTR and
// short writes; false when fd refuses (a closed reader: dtrun ignores SIGPIPE).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace rtd::launcher {

inline bool write_all(int fd, const char* data, std::size_t len) {
  while (len > 0) {
    const ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    len -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace rtd::launcher
