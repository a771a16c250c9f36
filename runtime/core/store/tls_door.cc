#include "runtime/core/store/tls_door.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rt_dist/error.h"
#include "runtime/core/check.h"
#include "runtime/core/log.h"
#include "runtime/core/store/tls.h"

namespace rtd {
namespace {

using Clock = std::chrono::steady_clock;
// A duplicate held this long without a call or an end is let go unjudged
// (gRPC gives a handshake 20 s by default).
constexpr auto kWatchFor = std::chrono::seconds(30);
// At most one log line of refused connections this often (a scanner's
// flood is counted, not logged line by line).
constexpr auto kLogEvery = std::chrono::milliseconds(100);

// The connections that have not carried a call yet, by peer key: note_call
// marks them. One table for every door of the process.
struct Pending {
  std::mutex mu;
  std::unordered_map<std::string, bool> called;  // key -> a call came
  std::atomic<int> doors{0};
};
Pending& pending() {
  static Pending* p = new Pending;  // outlives every door and every late call
  return *p;
}

std::string key_of(const sockaddr_storage& a) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(v4.sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    const int port = ntohs(v6.sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      inet_ntop(AF_INET, &v6.sin6_addr.s6_addr[12], ip, sizeof(ip));
      return std::string(ip) + ":" + std::to_string(port);
    }
    inet_ntop(AF_INET6, &v6.sin6_addr, ip, sizeof(ip));
    return "[" + std::string(ip) + "]:" + std::to_string(port);
  }
  return "";
}

// "ip:port", an IPv6 address in brackets.
std::string host_port(const std::string& ip, int port) {
  return (ip.find(':') != std::string::npos ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

}  // namespace

std::string door_peer_key(const std::string& grpc_peer) {
  std::string s;
  if (grpc_peer.rfind("ipv4:", 0) == 0 || grpc_peer.rfind("ipv6:", 0) == 0) {
    s = grpc_peer.substr(5);
  } else {
    return "";
  }
  for (const char* esc : {"%5B", "%5b"}) {
    for (auto at = s.find(esc); at != std::string::npos; at = s.find(esc)) s.replace(at, 3, "[");
  }
  for (const char* esc : {"%5D", "%5d"}) {
    for (auto at = s.find(esc); at != std::string::npos; at = s.find(esc)) s.replace(at, 3, "]");
  }
  const std::string mapped = "[::ffff:";
  if (s.rfind(mapped, 0) == 0 && s.find(']') != std::string::npos) {
    const auto close = s.find(']');
    const std::string v4 = s.substr(mapped.size(), close - mapped.size());
    if (v4.find('.') != std::string::npos) s = v4 + s.substr(close + 1);
  }
  return s;
}

void note_call(const grpc::ServerContextBase& ctx) {
  Pending& p = pending();
  if (p.doors.load(std::memory_order_relaxed) == 0) return;
  const std::string key = door_peer_key(ctx.peer());
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.called.find(key);
  if (it != p.called.end()) it->second = true;
}

struct TlsDoor::Impl {
  std::string server;
  int listen_fd = -1;
  int wake_fd = -1;
  int epoll_fd = -1;
  int port = 0;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor;
  std::thread loop;
  std::atomic<bool> stopping{false};
  bool counted = false;  // among pending().doors
  struct Watched {
    std::string key;
    Clock::time_point since;
  };
  std::map<int, Watched> watched;  // duplicate descriptor -> its connection (the loop's own)
  Clock::time_point last_log{};
  int unlogged = 0;

  void run();
  void accept_all();
  void let_go(int dup, bool ended);
  void sweep();
};

TlsDoor::TlsDoor(const std::string& ip, int port, std::string server)
    : impl_(std::make_unique<Impl>()) {
  impl_->server = std::move(server);
  const std::string where = host_port(ip, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(ip.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    throw Error(ErrorCategory::kConfig, impl_->server + ": cannot listen on " + where +
                                            ": not a numeric address of this host");
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int err = fd < 0 ? errno : 0;
  const int one = 1;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) err = errno;
  }
  freeaddrinfo(found);
  if (err != 0) {
    if (fd >= 0) ::close(fd);
    throw Error(ErrorCategory::kConfig,
                impl_->server + ": cannot listen on " + where + ": " + std::strerror(err), err);
  }
  impl_->listen_fd = fd;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  impl_->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                                  : reinterpret_cast<sockaddr_in&>(bound).sin_port);
}

TlsDoor::~TlsDoor() {
  close();
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
}

int TlsDoor::port() const { return impl_->port; }

void TlsDoor::attach(grpc::ServerBuilder& builder, std::shared_ptr<grpc::ServerCredentials> creds) {
  impl_->acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, std::move(creds));
}

void TlsDoor::open() {
  if (!impl_->acceptor) {
    throw Error(ErrorCategory::kInternal, impl_->server + ": the TLS door was opened unattached");
  }
  impl_->wake_fd = RTD_SYS_CHECK(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd");
  impl_->epoll_fd = RTD_SYS_CHECK(epoll_create1(EPOLL_CLOEXEC), "epoll_create1");
  for (int fd : {impl_->listen_fd, impl_->wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    RTD_SYS_CHECK(epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, fd, &ev), "epoll_ctl");
  }
  pending().doors.fetch_add(1);
  impl_->counted = true;
  impl_->loop = std::thread([impl = impl_.get()] { impl->run(); });
}

void TlsDoor::close() {
  if (impl_->loop.joinable()) {
    impl_->stopping = true;
    const std::uint64_t one = 1;
    (void)!write(impl_->wake_fd, &one, sizeof(one));
    impl_->loop.join();
  }
  while (!impl_->watched.empty()) impl_->let_go(impl_->watched.begin()->first, false);
  for (int* fd : {&impl_->epoll_fd, &impl_->wake_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (impl_->counted) pending().doors.fetch_sub(1);
  impl_->counted = false;
}

void TlsDoor::Impl::run() {
  epoll_event events[64];
  while (!stopping) {
    const int n = epoll_wait(epoll_fd, events, 64, 200);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd) {
        accept_all();
      } else if (fd == wake_fd) {
        std::uint64_t drained;
        (void)!read(wake_fd, &drained, sizeof(drained));
      } else {
        let_go(fd, true);  // the connection ended (either side)
      }
    }
    sweep();
  }
}

void TlsDoor::Impl::accept_all() {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    // Non-blocking, without delay, as gRPC's own accept leaves its sockets.
    const int fd =
        accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log::get("tls")->warn("{}: accepting a connection failed: {}", server,
                              std::strerror(errno));
      }
      return;
    }
    const int one = 1;
    if (peer.ss_family == AF_INET || peer.ss_family == AF_INET6)
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string key = key_of(peer);
    const int dup = key.empty() ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup >= 0) {
      {
        std::lock_guard<std::mutex> lock(pending().mu);
        pending().called[key] = false;  // before gRPC can see a call on it
      }
      epoll_event ev{};
      ev.events = EPOLLRDHUP;  // and EPOLLHUP, EPOLLERR: never its data
      ev.data.fd = dup;
      if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, dup, &ev) == 0) {
        watched[dup] = Watched{key, Clock::now()};
      } else {
        std::lock_guard<std::mutex> lock(pending().mu);
        pending().called.erase(key);
        ::close(dup);
      }
    }
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listen_fd;
    p.fd = fd;
    acceptor->HandleNewConnection(&p);  // gRPC owns fd from here
  }
}

void TlsDoor::Impl::let_go(int dup, bool ended) {
  auto it = watched.find(dup);
  if (it == watched.end()) return;
  bool called = false;
  {
    std::lock_guard<std::mutex> lock(pending().mu);
    auto c = pending().called.find(it->second.key);
    if (c != pending().called.end()) {
      called = c->second;
      pending().called.erase(c);
    }
  }
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, dup, nullptr);
  ::close(dup);
  const std::string key = it->second.key;
  watched.erase(it);
  if (!ended || called) return;
  const auto now = Clock::now();
  if (now - last_log < kLogEvery) {
    ++unlogged;
    return;
  }
  std::string more;
  if (unlogged > 0) more = " (and " + std::to_string(unlogged) + " more such connections before)";
  unlogged = 0;
  last_log = now;
  log::get("tls")->warn(
      "{}: a connection from {} ended before any call{}: its TLS handshake was refused (a "
      "certificate the job's CA did not sign, a name not among --tls-peer-names, or no "
      "certificate), or it left during the handshake",
      server, key, more);
}

void TlsDoor::Impl::sweep() {
  const auto now = Clock::now();
  std::vector<int> done;
  {
    std::lock_guard<std::mutex> lock(pending().mu);
    for (const auto& [dup, w] : watched) {
      auto c = pending().called.find(w.key);
      if ((c != pending().called.end() && c->second) || now - w.since > kWatchFor) {
        done.push_back(dup);
      }
    }
  }
  for (int dup : done) let_go(dup, false);
}

std::unique_ptr<TlsDoor> add_control_port(grpc::ServerBuilder& builder, const std::string& ip,
                                          int port, const TlsFiles& tls, const std::string& server,
                                          int* selected_port) {
  if (!tls.enabled()) {
    builder.AddListeningPort(host_port(ip, port), server_credentials(tls), selected_port);
    return nullptr;
  }
  auto door = std::make_unique<TlsDoor>(ip, port, server);
  door->attach(builder, server_credentials(tls));
  *selected_port = door->port();
  return door;
}

}  // namespace rtd
