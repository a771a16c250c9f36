// Socket helpers of the launcher (POSIX sockets, getaddrinfo).
#include "launcher/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "rt_dist/error.h"
#include "runtime/core/check.h"

namespace rtd::launcher {
namespace {

struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

sockaddr_storage to_sockaddr(const std::string& ip, int port, socklen_t* len) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
  } else {
    throw Error(ErrorCategory::kConfig, "'" + ip + "' is not a numeric IP address");
  }
  return ss;
}

std::string ip_of(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, text, sizeof(text));
  }
  return text;
}

// Binds a TCP socket to ip:port; returns errno (0 on success) and the bound port.
// With SO_REUSEADDR, as gRPC's listener has: connections of a job that just
// ended (TIME_WAIT) do not make the port look taken; a listener still does.
// Binds a socket to ip:port (0: any free port), reporting the port bound;
// the socket is kept in *kept when given, without SO_REUSEADDR (so that the
// kernel hands its port to no other bind, SO_REUSEADDR or not), else closed.
// Returns errno or 0.
int try_bind(const std::string& ip, int port, int* bound_port, Socket* kept = nullptr) {
  socklen_t len = 0;
  sockaddr_storage addr = to_sockaddr(ip, port, &len);
  Socket local;
  Socket& s = kept ? *kept : local;
  s.fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.fd < 0) return errno;
  const int on = 1;
  if (kept == nullptr) setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  if (bind(s.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) return errno;
  if (bound_port) {
    sockaddr_storage got{};
    socklen_t got_len = sizeof(got);
    getsockname(s.fd, reinterpret_cast<sockaddr*>(&got), &got_len);
    *bound_port =
        ntohs(got.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&got)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  }
  return 0;
}

}  // namespace

std::string resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    throw Error(ErrorCategory::kConfig, "cannot resolve rendezvous host '" + host +
                                            "': " + gai_strerror(rc) +
                                            " (check --rdzv; an IP address avoids DNS)");
  }
  sockaddr_storage ss{};
  std::memcpy(&ss, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  return ip_of(ss);
}

bool is_local_address(const std::string& ip) { return try_bind(ip, 0, nullptr) == 0; }

bool accepts_tcp(const std::string& ip, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* result = nullptr;
  if (getaddrinfo(ip.c_str(), std::to_string(port).c_str(), &hints, &result) != 0) return false;
  int fd = socket(result->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  bool ok = false;
  if (fd >= 0) {
    int rc = connect(fd, result->ai_addr, result->ai_addrlen);
    if (rc == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      ok = poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
           err == 0;
    }
    close(fd);
  }
  freeaddrinfo(result);
  return ok;
}

void check_bindable(const std::string& ip, int port) {
  int err = try_bind(ip, port, nullptr);
  if (err == 0) return;
  std::string where = join_host_port(ip, port);
  if (err == EADDRINUSE) {
    throw Error(ErrorCategory::kConfig,
                "cannot host the rendezvous on " + where +
                    ": the port is already in use (another dtrun job?); pick another port "
                    "in --rdzv",
                err);
  }
  if (err == EADDRNOTAVAIL) {
    throw Error(ErrorCategory::kConfig,
                "cannot host the rendezvous on " + where +
                    ": that address is not on this host; run node rank 0 on the host named "
                    "in --rdzv",
                err);
  }
  throw Error(ErrorCategory::kConfig,
              "cannot host the rendezvous on " + where + ": " + std::strerror(err), err);
}

std::string local_address_towards(const std::string& ip, int port) {
  socklen_t len = 0;
  sockaddr_storage addr = to_sockaddr(ip, port == 0 ? 9 : port, &len);
  Socket s;
  s.fd = RTD_SYS_CHECK(socket(addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), "socket");
  RTD_SYS_CHECK(connect(s.fd, reinterpret_cast<sockaddr*>(&addr), len),
                "finding the local address that reaches " + ip);
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  RTD_SYS_CHECK(getsockname(s.fd, reinterpret_cast<sockaddr*>(&local), &local_len), "getsockname");
  return ip_of(local);
}

int free_port(const std::string& ip) {
  int port = 0;
  int err = try_bind(ip, 0, &port);
  if (err != 0) {
    throw Error(ErrorCategory::kBackend,
                "cannot find a free port on " + ip + ": " + std::strerror(err), err);
  }
  return port;
}

PortHold::PortHold(const std::string& ip) {
  Socket s;
  int err = try_bind(ip, 0, &port_, &s);
  if (err != 0) {
    throw Error(ErrorCategory::kBackend,
                "cannot find a free port on " + ip + ": " + std::strerror(err), err);
  }
  std::swap(fd_, s.fd);
}

PortHold::~PortHold() {
  if (fd_ >= 0) close(fd_);
}

std::string random_token() {
  unsigned char bytes[16];
  int fd = RTD_SYS_CHECK(open("/dev/urandom", O_RDONLY | O_CLOEXEC), "opening /dev/urandom");
  ssize_t got = read(fd, bytes, sizeof(bytes));
  close(fd);
  if (got != static_cast<ssize_t>(sizeof(bytes))) {
    throw Error(ErrorCategory::kBackend, "short read from /dev/urandom");
  }
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  return token;
}

std::string join_host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::vector<std::string> parse_etcd_endpoints(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string e = text.substr(start, comma - start);
    const auto colon = e.rfind(':');
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < e.size() && e.size() <= 255;
    int port = 0;
    if (ok) {
      for (std::size_t i = colon + 1; i < e.size(); ++i) {
        ok = ok && e[i] >= '0' && e[i] <= '9' && port < 100000;
        port = port * 10 + (e[i] - '0');
      }
      ok = ok && port >= 1 && port <= 65535;
    }
    if (!ok)
      throw Error(ErrorCategory::kConfig,
                  "--rdzv=" + text + ": '" + e +
                      "' is not HOST:PORT; the etcd backend takes the etcd members as "
                      "HOST:PORT[,HOST:PORT...] (etcd's client port, usually 2379)");
    out.push_back(e);
    start = comma + 1;
  }
  return out;
}

}  // namespace rtd::launcher
