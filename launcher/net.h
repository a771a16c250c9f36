// Socket helpers of the launcher: resolving the rendezvous host, telling whether
// an address belongs to this host, finding the local address that reaches a
// peer, free ports, and the job token.
#pragma once

#include <string>
#include <vector>

namespace rtd::launcher {

// Resolves host to a numeric IPv4/IPv6 address; throws rtd::Error(kConfig) naming host.
std::string resolve(const std::string& host);
// True when ip can be bound on this host (it is one of this host's addresses).
bool is_local_address(const std::string& ip);
// Whether something accepts TCP connections at ip:port within timeout_ms.
bool accepts_tcp(const std::string& ip, int port, int timeout_ms);
// Throws rtd::Error(kConfig) saying why ip:port cannot be listened on (in use, not local).
void check_bindable(const std::string& ip, int port);
// The address of this host's interface that routes to ip (no packet is sent).
std::string local_address_towards(const std::string& ip, int port);
// A port on ip that was free a moment ago.
int free_port(const std::string& ip);
// A free port on ip, kept bound (not listening) while this lives: nothing on
// this host that binds meanwhile (our own server's port 0) is handed it.
// Free again once this is destroyed (workers get it as MASTER_PORT).
class PortHold {
 public:
  explicit PortHold(const std::string& ip);  // throws rtd::Error when none is free
  ~PortHold();
  PortHold(const PortHold&) = delete;
  PortHold& operator=(const PortHold&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};
// 32 random hex characters from /dev/urandom.
std::string random_token();
// "host:port", with brackets around IPv6 literals.
std::string join_host_port(const std::string& host, int port);

// "h1:2379,h2:2379" (the --rdzv of the etcd backend) as a list; throws
// rtd::Error(kConfig) naming an entry that is not HOST:PORT.
std::vector<std::string> parse_etcd_endpoints(const std::string& text);

}  // namespace rtd::launcher
